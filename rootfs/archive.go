package rootfs

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds on what Import accepts. The real tree is ~1.3 GB in ~40k entries.
const (
	maxImportBytes   = 8 << 30
	maxImportEntries = 1 << 20
)

// Export writes r as a gzip tar: <version>/, <version>/manifest.json, then
// <version>/root/... in path order, keeping modes (with setuid/setgid/
// sticky), uid/gid, mtimes (whole seconds: the .pyc files are validated
// against them), symlinks and hardlinks. It fails on device nodes, FIFOs and
// sockets, which Import would refuse.
func Export(r *Rootfs, w io.Writer) error {
	// BestSpeed: 20 s and 405 MiB for the real tree here, against 58 s and
	// 350 MiB at the default level.
	gz, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return fmt.Errorf("export rootfs %s: %w", r.Dir, err)
	}
	tw := tar.NewWriter(gz)
	ver := r.Manifest.Version
	if err := exportEntry(tw, r.Dir, ver, nil); err != nil {
		return fmt.Errorf("export rootfs %s: %w", r.Dir, err)
	}
	if err := exportEntry(tw, filepath.Join(r.Dir, manifestName), ver+"/"+manifestName, nil); err != nil {
		return fmt.Errorf("export rootfs %s: %w", r.Dir, err)
	}
	links := map[[2]uint64]string{}
	err = filepath.WalkDir(r.Root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(r.Root, p)
		if err != nil {
			return err
		}
		name := ver + "/" + treeName
		if rel != "." {
			name += "/" + filepath.ToSlash(rel)
		}
		return exportEntry(tw, p, name, links)
	})
	if err != nil {
		return fmt.Errorf("export rootfs %s: %w", r.Dir, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("export rootfs %s: %w", r.Dir, err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("export rootfs %s: %w", r.Dir, err)
	}
	return nil
}

// exportEntry writes the file at p as the archive entry name. links maps
// (dev, inode) of multiply-linked files to their first name; nil disables
// hardlink detection.
func exportEntry(tw *tar.Writer, p, name string, links map[[2]uint64]string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, 0),
	}
	var f *os.File
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case unix.S_IFLNK:
		hdr.Typeflag = tar.TypeSymlink
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		hdr.Linkname = target
	case unix.S_IFREG:
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := links[key]; ok && st.Nlink > 1 {
			hdr.Typeflag = tar.TypeLink
			hdr.Linkname = first
			break
		}
		if links != nil && st.Nlink > 1 {
			links[key] = name
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: p, Err: err}
		}
		f = os.NewFile(uintptr(fd), p)
		defer f.Close()
		hdr.Typeflag = tar.TypeReg
		hdr.Size = st.Size
	default:
		return fmt.Errorf("%s: %w: file type %#o cannot be exported", p, ErrCorrupt, st.Mode&unix.S_IFMT)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if f != nil {
		if _, err := io.Copy(tw, io.LimitReader(f, hdr.Size)); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// Import extracts a gzip tar made by Export into base, verifies the tree
// against the manifest's content hash, moves it to base/<version> and points
// base/current at it. If base/<version> is already sealed, Import stops
// reading, leaves the tree alone and only points current at it.
//
// The archive is untrusted: entries are confined to one <version>/ directory
// holding manifest.json and root/; absolute names, "..", empty or "."
// components, duplicate names, device nodes, FIFOs and hardlinks leaving
// the tree are refused; and an entry is written only into a directory that
// this archive itself created, so a symlink from the archive is never
// followed (the classic tar escape: a link to /etc, then link/passwd). Total
// size and entry count are bounded. Every refusal wraps ErrCorrupt.
func Import(rd io.Reader, base string) (*Rootfs, error) {
	base, err := filepath.Abs(base)
	if err != nil {
		return nil, fmt.Errorf("import rootfs into %s: %w", base, err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("import rootfs into %s: %w", base, err)
	}
	zr, err := gzip.NewReader(rd)
	if err != nil {
		return nil, fmt.Errorf("import rootfs into %s: %w: %v", base, ErrCorrupt, err)
	}
	// The staging directory is 0700 so that nobody else can reach a setuid
	// file before the tree is verified and the archive's modes are final.
	stage, err := os.MkdirTemp(base, ".import-")
	if err != nil {
		return nil, fmt.Errorf("import rootfs into %s: %w", base, err)
	}
	defer os.RemoveAll(stage)
	sroot, err := os.OpenRoot(stage)
	if err != nil {
		return nil, fmt.Errorf("import rootfs into %s: %w", base, err)
	}
	defer sroot.Close()

	x := &extractor{root: sroot, base: base, kinds: map[string]byte{}}
	present, err := x.extract(tar.NewReader(zr))
	if err != nil {
		return nil, fmt.Errorf("import rootfs into %s: %w", base, err)
	}
	final := filepath.Join(base, x.version)
	if !present {
		m, err := x.checkManifest()
		if err != nil {
			return nil, fmt.Errorf("import rootfs into %s: %w", base, err)
		}
		tree := filepath.Join(stage, x.version, treeName)
		got, _, _, err := Hash(tree)
		if err != nil {
			return nil, fmt.Errorf("import rootfs into %s: %w", base, err)
		}
		if got != m.ContentHash {
			return nil, fmt.Errorf("import rootfs into %s: %w: tree hashes to %s, manifest says %s",
				base, ErrCorrupt, got, m.ContentHash)
		}
		if err := os.Rename(filepath.Join(stage, x.version), final); err != nil {
			// A concurrent import of the same version won the race.
			if !isVersionDir(final) {
				return nil, fmt.Errorf("import rootfs into %s: move into place (a leftover %s without a manifest must be removed by hand): %w",
					base, final, err)
			}
		}
		if err := syncDir(base); err != nil {
			return nil, fmt.Errorf("import rootfs into %s: %w", base, err)
		}
	}
	if err := setCurrent(base, x.version); err != nil {
		return nil, fmt.Errorf("import rootfs into %s: %w", base, err)
	}
	return Open(final)
}

// extractor writes archive entries into a staging directory through os.Root.
type extractor struct {
	root    *os.Root
	base    string
	version string
	kinds   map[string]byte // every name extracted so far: 'd', 'f' or 'l'
	dirs    []dirMeta
	entries int
	bytes   int64
}

// dirMeta is applied after extraction: a read-only directory mode would not
// stop root, but its mtime changes with every entry written into it.
type dirMeta struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

// extract reads the whole archive. present reports that base already holds
// the archive's version sealed, in which case it stops after the first entry.
func (x *extractor) extract(tr *tar.Reader) (present bool, err error) {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return false, fmt.Errorf("%w: read archive: %v", ErrCorrupt, err)
		}
		if x.entries++; x.entries > maxImportEntries {
			return false, fmt.Errorf("%w: more than %d entries", ErrCorrupt, maxImportEntries)
		}
		if err := x.entry(hdr, tr); err != nil {
			return false, err
		}
		if x.entries == 1 && isVersionDir(filepath.Join(x.base, x.version)) {
			return true, nil
		}
	}
	if x.version == "" {
		return false, fmt.Errorf("%w: empty archive", ErrCorrupt)
	}
	if x.kinds[x.version+"/"+manifestName] != 'f' || x.kinds[x.version+"/"+treeName] != 'd' {
		return false, fmt.Errorf("%w: archive lacks %s/%s or %s/%s/", ErrCorrupt, x.version, manifestName, x.version, treeName)
	}
	// Deepest first, so setting a directory's mtime is not undone by its
	// children.
	sort.Slice(x.dirs, func(i, j int) bool { return x.dirs[i].name > x.dirs[j].name })
	for _, d := range x.dirs {
		if err := x.root.Chmod(d.name, d.mode); err != nil {
			return false, err
		}
		if err := x.root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return false, err
		}
	}
	return false, nil
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if err := x.place(name, hdr.Typeflag); err != nil {
		return err
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid > 1<<32-2 || hdr.Gid > 1<<32-2 {
		return fmt.Errorf("%w: %s: uid/gid %d/%d out of range", ErrCorrupt, name, hdr.Uid, hdr.Gid)
	}
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	mtime := hdr.ModTime

	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.root.Mkdir(name, 0o700); err != nil {
			return err
		}
		if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		x.dirs = append(x.dirs, dirMeta{name: name, mode: mode, mtime: mtime})
		x.kinds[name] = 'd'

	case tar.TypeReg:
		if hdr.Size < 0 || hdr.Size > maxImportBytes-x.bytes {
			return fmt.Errorf("%w: %s: archive content exceeds %d bytes", ErrCorrupt, name, int64(maxImportBytes))
		}
		x.bytes += hdr.Size
		// O_EXCL: never write through or over anything already there.
		f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		x.kinds[name] = 'f'
		if err := writeFile(f, r, hdr, mode); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		if err := x.root.Chtimes(name, mtime, mtime); err != nil {
			return err
		}

	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 || len(hdr.Linkname) > 4096 {
			return fmt.Errorf("%w: %s: bad symlink target", ErrCorrupt, name)
		}
		// The target is stored, never resolved: the tree is full of absolute
		// links (/etc/alternatives/...) that are right inside a sandbox.
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		x.kinds[name] = 'l'

	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hardlink %s: %w", name, err)
		}
		if x.kinds[target] != 'f' || !strings.HasPrefix(target, x.version+"/"+treeName+"/") {
			return fmt.Errorf("%w: hardlink %s -> %s: target is not a file extracted into the tree", ErrCorrupt, name, target)
		}
		if err := x.root.Link(target, name); err != nil {
			return err
		}
		x.kinds[name] = 'f'

	default:
		return fmt.Errorf("%w: %s: entry type %q refused (device nodes, FIFOs and other specials have no place in the tree)",
			ErrCorrupt, name, hdr.Typeflag)
	}
	return nil
}

// place checks that name may be created: inside the single <version>/
// directory, in the layout Export writes, not seen before, under a directory
// that this archive created.
func (x *extractor) place(name string, typ byte) error {
	top, rest, _ := strings.Cut(name, "/")
	if x.version == "" {
		if rest != "" || typ != tar.TypeDir || !versionRE.MatchString(top) {
			return fmt.Errorf("%w: first entry %q is not a <version>/ directory", ErrCorrupt, name)
		}
		x.version = top
		return nil
	}
	if top != x.version {
		return fmt.Errorf("%w: entry %q is outside %s/", ErrCorrupt, name, x.version)
	}
	switch {
	case rest == manifestName:
		if typ != tar.TypeReg {
			return fmt.Errorf("%w: %s is not a regular file", ErrCorrupt, name)
		}
	case rest == treeName:
		if typ != tar.TypeDir {
			return fmt.Errorf("%w: %s is not a directory", ErrCorrupt, name)
		}
	case strings.HasPrefix(rest, treeName+"/"):
	default:
		return fmt.Errorf("%w: entry %q is neither %s/%s nor under %s/%s/", ErrCorrupt, name, x.version, manifestName, x.version, treeName)
	}
	if _, dup := x.kinds[name]; dup {
		return fmt.Errorf("%w: duplicate entry %q", ErrCorrupt, name)
	}
	// The parent must be a real directory from this archive: that rules out
	// writing through a symlink the archive planted, whatever it points at.
	if x.kinds[path.Dir(name)] != 'd' {
		return fmt.Errorf("%w: entry %q: parent is not a directory created earlier in the archive", ErrCorrupt, name)
	}
	return nil
}

// cleanName validates an archive path and strips a directory's trailing
// slash.
func cleanName(n string) (string, error) {
	n = strings.TrimSuffix(n, "/")
	if n == "" || len(n) > 4096 || strings.IndexByte(n, 0) >= 0 {
		return "", fmt.Errorf("%w: bad entry name %q", ErrCorrupt, n)
	}
	for _, c := range strings.Split(n, "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("%w: entry name %q is absolute or has an empty, . or .. component", ErrCorrupt, n)
		}
	}
	return n, nil
}

// writeFile copies exactly hdr.Size bytes and sets owner and mode on the
// open file; chown before chmod, since chown clears setuid bits.
func writeFile(f *os.File, r io.Reader, hdr *tar.Header, mode fs.FileMode) error {
	_, err := io.CopyN(f, r, hdr.Size)
	if err == nil {
		err = f.Chown(hdr.Uid, hdr.Gid)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w: truncated archive", ErrCorrupt)
	}
	return err
}

// checkManifest reads the staged manifest and ties it to the archive's
// directory name.
func (x *extractor) checkManifest() (*Manifest, error) {
	f, err := x.root.Open(x.version + "/" + manifestName)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := decodeManifest(f)
	if err != nil {
		return nil, err
	}
	if m.Version != x.version {
		return nil, fmt.Errorf("%w: manifest is for version %q, archive directory is %q", ErrCorrupt, m.Version, x.version)
	}
	return m, nil
}
