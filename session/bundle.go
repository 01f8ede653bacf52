package session

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A hibernated session's saved upper layer (upper-saved: owners, modes,
// symlinks, overlayfs whiteouts and opaque markers) travels to a shared
// store as one tar object. It is written from a tree the host made
// (SaveUpper) and read back into a new host-owned directory that no
// sandbox sees, then copied onto the new disk by LoadUpper, whose copy
// never follows a symlink and moves owners to the new uid slot. The tar
// comes from the store, so the reader trusts nothing in it: names are
// confined (os.Root), types are limited to directories, regular files,
// symlinks and whiteouts, setuid/setgid bits and all xattrs but
// overlayfs' and user.* are dropped, and sizes and counts are bounded.

// maxBundleEntries bounds the entries of an upper layer's tar.
const maxBundleEntries = 200_000

// bundleXattr says which extended attributes travel: overlayfs' own
// (opaque directories, redirects) and user.*; never security.* (file
// capabilities embed a host uid) nor anything else trusted.*.
func bundleXattr(name string) bool {
	return strings.HasPrefix(name, "trusted.overlay.") || strings.HasPrefix(name, "user.")
}

// tarTree writes the tree at dir to w. Regular files are written dense
// (tar has no holes here): more than max bytes of file data is refused,
// and the caller keeps the session on this node.
func tarTree(dir string, w io.Writer, max int64) error {
	tw := tar.NewWriter(w)
	var total int64
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if n++; n > maxBundleEntries {
			return fmt.Errorf("%w: more than %d entries", ErrLimit, maxBundleEntries)
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil // a socket, a fifo: not part of a workspace copy
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Format = tar.FormatPAX
		hdr.Uname, hdr.Gname = "", ""
		if st != nil {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		}
		if hdr.Typeflag == tar.TypeChar && (hdr.Devmajor != 0 || hdr.Devminor != 0) {
			return nil // only whiteouts (0:0) are devices of a workspace
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if x := xattrsOf(p); len(x) > 0 {
				hdr.PAXRecords = map[string]string{}
				for k, v := range x {
					hdr.PAXRecords["SCHILY.xattr."+k] = v
				}
			}
		}
		if fi.Mode().IsRegular() {
			if total += fi.Size(); total > max {
				return fmt.Errorf("%w: its files are more than %d MiB written out (sparse files count in full)", ErrLimit, max>>20)
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, fi.Size())
		return err
	})
	if err != nil {
		return fmt.Errorf("bundle %s: %w", dir, err)
	}
	return tw.Close()
}

func xattrsOf(p string) map[string]string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n <= 0 {
		return nil
	}
	out := map[string]string{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if !bundleXattr(name) {
			continue
		}
		val := make([]byte, 4096)
		m, err := unix.Lgetxattr(p, name, val)
		if err == nil {
			out[name] = string(val[:m])
		}
	}
	return out
}

// untarTree unpacks r into dir (created, 0700), at most max bytes of
// file data, through an os.Root: no entry lands outside dir whatever its
// name or the symlinks before it.
func untarTree(r io.Reader, dir string, max int64) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("unbundle: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("unbundle: %w", err)
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unbundle: %w", err)
		}
		if n >= maxBundleEntries {
			return fmt.Errorf("unbundle: more than %d entries", maxBundleEntries)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if _, err := cleanRel(name); err != nil || name == "" || path.Clean(name) != name {
			return fmt.Errorf("unbundle: entry %q: not a clean relative path", trunc(hdr.Name))
		}
		if err := unbundleEntry(root, tr, hdr, name, &total, max); err != nil {
			return fmt.Errorf("unbundle %q: %w", trunc(name), err)
		}
	}
}

func unbundleEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string, total *int64, max int64) error {
	mode := os.FileMode(hdr.Mode) & (os.ModePerm | os.ModeSticky)
	if hdr.Mode&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case tar.TypeReg:
		if *total += hdr.Size; hdr.Size < 0 || *total > max {
			return fmt.Errorf("%w: more than %d MiB of files", ErrLimit, max>>20)
		}
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, tr, hdr.Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		if len(hdr.Linkname) > 4096 {
			return errors.New("symlink target too long")
		}
		// Its target is never followed by the host: LoadUpper copies
		// the link itself.
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		return root.Lchown(name, hdr.Uid, hdr.Gid)
	case tar.TypeChar:
		if hdr.Devmajor != 0 || hdr.Devminor != 0 {
			return errors.New("a device other than a whiteout")
		}
		parent, err := root.Open(path.Dir(name))
		if err != nil {
			return err
		}
		err = unix.Mknodat(int(parent.Fd()), path.Base(name), unix.S_IFCHR, 0)
		parent.Close()
		if err != nil {
			return err
		}
		return root.Lchown(name, hdr.Uid, hdr.Gid)
	default:
		return fmt.Errorf("entry type %q is not part of a workspace", hdr.Typeflag)
	}
	if hdr.Uid < 0 || hdr.Gid < 0 {
		return errors.New("negative owner")
	}
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for k, v := range hdr.PAXRecords {
		if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && bundleXattr(x) && len(v) <= 4096 {
			if err := unix.Fsetxattr(int(f.Fd()), x, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s: %w", x, err)
			}
		}
	}
	if err := f.Chown(hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	// No setuid or setgid bit comes from a store.
	return f.Chmod(mode)
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
