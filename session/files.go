package session

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Workspace files are read and written on the host only through os.Root
// opened on a directory the sandbox cannot replace (the overlay's root or
// its upper layer), so a symlink or ".." planted by a cell resolves inside
// the sandbox's own tree, never to a host file (Judge0 CVE-2024-28185).

const (
	// maxWorkspaceEntries bounds a workspace scan.
	maxWorkspaceEntries = 100000
	// MaxFileBytes bounds one upload or download.
	MaxFileBytes = 256 << 20
)

// cleanRel validates a client-supplied workspace path and returns it
// relative and clean. Absolute paths and ".." are refused outright rather
// than resolved: the client means a file in the workspace or is probing.
func cleanRel(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%w: path is empty", ErrBadRequest)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path contains a NUL byte", ErrBadRequest)
	}
	if len(p) > 4096 {
		return "", fmt.Errorf("%w: path is longer than 4096 bytes", ErrBadRequest)
	}
	p = strings.TrimPrefix(p, Workdir+"/")
	if path.IsAbs(p) {
		return "", fmt.Errorf("%w: path %q is absolute; paths are relative to %s", ErrBadRequest, p, Workdir)
	}
	c := path.Clean(p)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: path %q leaves the working directory %s", ErrBadRequest, p, Workdir)
	}
	return c, nil
}

// openWorkspace opens the workspace directory below base (an overlay root or
// upper layer). The "work" name is itself resolved inside base, so a cell
// that replaced /work with a symlink cannot move the workspace out.
func openWorkspace(base string) (*os.Root, error) {
	r, err := os.OpenRoot(base)
	if err != nil {
		return nil, fmt.Errorf("open sandbox root: %w", err)
	}
	defer r.Close()
	w, err := r.OpenRoot(strings.TrimPrefix(Workdir, "/"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	return w, nil
}

// fileStamp identifies a version of a file cheaply.
type fileStamp struct {
	size  int64
	mtime int64
	ctime int64
	ino   uint64
	dir   bool
}

// snapshot maps workspace paths to their stamps.
type snapshot map[string]fileStamp

// walk visits every entry of the workspace under root, parents before
// children, without following symlinks (entries are lstat'ed and
// directories opened through root), skipping overlay whiteouts, and stops
// after maxWorkspaceEntries.
func walk(root *os.Root, visit func(p string, fi fs.FileInfo, st *syscall.Stat_t)) error {
	n := 0
	var rec func(dir string) error
	rec = func(dir string) error {
		f, err := root.Open(dir)
		if err != nil {
			return err
		}
		ents, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, e := range ents {
			if n >= maxWorkspaceEntries {
				return nil
			}
			p := e.Name()
			if dir != "." {
				p = dir + "/" + e.Name()
			}
			fi, err := e.Info()
			if err != nil {
				continue
			}
			st, _ := fi.Sys().(*syscall.Stat_t)
			// An overlay whiteout (char device 0:0) marks a deletion.
			if st != nil && fi.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0 {
				continue
			}
			n++
			visit(p, fi, st)
			if fi.IsDir() {
				if err := rec(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := rec("."); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// scan records the stamp of every directory, regular file and symlink.
func scan(root *os.Root) (snapshot, error) {
	s := snapshot{}
	err := walk(root, func(p string, fi fs.FileInfo, st *syscall.Stat_t) {
		if !fi.IsDir() && !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
			return
		}
		stamp := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano(), dir: fi.IsDir()}
		if st != nil {
			stamp.ctime, stamp.ino = st.Ctim.Nano(), st.Ino
		}
		s[p] = stamp
	})
	return s, err
}

// diff lists files created, modified or deleted between two snapshots
// (directories are not reported), sorted by path.
func diff(before, after snapshot) []FileChange {
	var out []FileChange
	for p, a := range after {
		if a.dir {
			continue
		}
		b, ok := before[p]
		switch {
		case !ok || b.dir:
			out = append(out, FileChange{Path: p, Size: a.size, Change: "created"})
		case b != a:
			out = append(out, FileChange{Path: p, Size: a.size, Change: "modified"})
		}
	}
	for p, b := range before {
		if b.dir {
			continue
		}
		if a, ok := after[p]; !ok || a.dir {
			out = append(out, FileChange{Path: p, Change: "deleted"})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// readFile reads a regular file through root, refusing symlinks, devices
// and anything larger than limit.
func readFile(root *os.Root, rel string, limit int64) ([]byte, error) {
	fi, err := root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadRequest, rel)
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadRequest, rel)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d allowed", ErrLimit, rel, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s grew past %d bytes", ErrLimit, rel, limit)
	}
	return b, nil
}

// writeFile creates or replaces rel through root with data, owned by uid
// (the sandbox's root), creating parent directories likewise. Ownership is
// set on the open descriptor, never by path.
func writeFile(root *os.Root, rel string, data []byte, uid int) error {
	dir := path.Dir(rel)
	if dir != "." {
		parts := strings.Split(dir, "/")
		for i := range parts {
			sub := strings.Join(parts[:i+1], "/")
			if err := root.Mkdir(sub, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("create %s: %w", sub, err)
			}
			d, err := root.Open(sub)
			if err != nil {
				return fmt.Errorf("open %s: %w", sub, err)
			}
			fi, err := d.Stat()
			if err == nil && fi.IsDir() && fi.Sys().(*syscall.Stat_t).Uid == 0 {
				err = d.Chown(uid, uid)
			}
			d.Close()
			if err != nil {
				return fmt.Errorf("chown %s: %w", sub, err)
			}
		}
	}
	if fi, err := root.Lstat(rel); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s exists and is not a regular file", ErrBadRequest, rel)
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", rel, err)
	}
	if err := f.Chown(uid, uid); err != nil {
		f.Close()
		return fmt.Errorf("chown %s: %w", rel, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", rel, err)
	}
	return f.Close()
}

// list returns the workspace entries under root.
func list(root *os.Root) ([]Entry, error) {
	var out []Entry
	err := walk(root, func(p string, fi fs.FileInfo, _ *syscall.Stat_t) {
		out = append(out, Entry{Path: p, Size: fi.Size(), Dir: fi.IsDir(), ModTime: fi.ModTime().UTC().Truncate(time.Millisecond)})
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func sha256hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
