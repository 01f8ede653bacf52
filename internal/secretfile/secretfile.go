package secretfile

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Read returns the content of path, the value of config key key, at most
// max bytes. groupRead admits modes 0640 and 0440 too (a key that a group
// of operators may read); otherwise only 0600 and 0400.
func Read(key, path string, max int64, groupRead bool) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	mask, want := os.FileMode(0o077), "0600 or 0400"
	if groupRead {
		mask, want = 0o037, "0600, 0400, 0640 or 0440"
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s %s: not a regular file", key, path)
	case fi.Mode().Perm()&mask != 0:
		return nil, fmt.Errorf("%s %s: mode %04o lets others read or change it; want %s (chmod 600 %s)", key, path, fi.Mode().Perm(), want, path)
	case st == nil || int(st.Uid) != os.Geteuid():
		owner := -1
		if st != nil {
			owner = int(st.Uid)
		}
		return nil, fmt.Errorf("%s %s: owned by uid %d, not by this daemon's user (%d)", key, path, owner, os.Geteuid())
	}
	return readAtMost(key, path, f, fi.Size(), max)
}

// ReadTrusted returns the content of path, the value of config key key,
// at most max bytes: a file the daemon acts on that need not be secret (its
// config, a client CA). Anyone may read it; only its owner, this process's
// user or root, may change it. A config a group member could write names
// the programs root runs (fixer.command) and the policies; a client CA
// they could write lets them sign a certificate that names root.
func ReadTrusted(key, path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s %s: not a regular file", key, path)
	case fi.Mode().Perm()&0o022 != 0:
		return nil, fmt.Errorf("%s %s: mode %04o lets others change it; want it writable by its owner only (chmod go-w %s)", key, path, fi.Mode().Perm(), path)
	case st == nil || int(st.Uid) != os.Geteuid() && st.Uid != 0:
		owner := -1
		if st != nil {
			owner = int(st.Uid)
		}
		return nil, fmt.Errorf("%s %s: owned by uid %d, neither root nor this process's user (%d)", key, path, owner, os.Geteuid())
	}
	return readAtMost(key, path, f, fi.Size(), max)
}

// readAtMost reads f, path of key whose size was size, to at most max
// bytes.
func readAtMost(key, path string, f *os.File, size, max int64) ([]byte, error) {
	if size > max {
		return nil, fmt.Errorf("%s %s: %d bytes, over the %d-byte limit", key, path, size, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s %s: over the %d-byte limit", key, path, max)
	}
	return b, nil
}
