package rootfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stamped opens a sealed tree and runs a first VerifyStamped, which hashes
// and records the stamp; later is a time well after every ctime of the tree.
func stamped(t *testing.T) (r *Rootfs, stamp string, later time.Time) {
	t.Helper()
	base, _ := sealed(t)
	r, err := Open(base)
	if err != nil {
		t.Fatal(err)
	}
	stamp = filepath.Join(t.TempDir(), "rootfs-verified.json")
	later = time.Now().Add(10 * time.Second)
	res, err := r.VerifyStamped(stamp, time.Hour, later)
	if err != nil || !res.Hashed {
		t.Fatalf("first VerifyStamped = %+v, %v; want a full hash", res, err)
	}
	if fi, err := os.Stat(stamp); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stamp after a full hash: %v %v, want mode 0600", fi, err)
	}
	return r, stamp, later
}

func TestVerifyStampedSkipsUnchangedTree(t *testing.T) {
	r, stamp, later := stamped(t)
	res, err := r.VerifyStamped(stamp, time.Hour, later.Add(time.Minute))
	if err != nil || res.Hashed || !strings.Contains(res.Why, "metadata unchanged") {
		t.Fatalf("second VerifyStamped = %+v, %v; want no hash", res, err)
	}
}

// Every change through the file system is seen, even a same-size rewrite
// whose mtime is set back: its ctime moves.
func TestVerifyStampedSeesChanges(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(root string) error
	}{
		{"same-size content, mtime restored", func(r string) error {
			p := filepath.Join(r, "usr/bin/su")
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt([]byte("SETUID"), 0); err != nil {
				return err
			}
			f.Close()
			return os.Chtimes(p, fi.ModTime(), fi.ModTime())
		}},
		{"mode", func(r string) error { return os.Chmod(filepath.Join(r, "usr/bin/python3.11"), 0o777) }},
		{"planted file", func(r string) error { return os.WriteFile(filepath.Join(r, "work/x"), nil, 0o644) }},
		{"symlink", func(r string) error {
			os.Remove(filepath.Join(r, "bin"))
			return os.Symlink("/tmp", filepath.Join(r, "bin"))
		}},
		{"file replaced by a copy", func(r string) error {
			p := filepath.Join(r, "etc/pip.conf")
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[0] = 'X'
			if err := os.WriteFile(p+".new", b, 0o644); err != nil {
				return err
			}
			return os.Rename(p+".new", p)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, stamp, later := stamped(t)
			if err := tt.tamper(r.Root); err != nil {
				t.Fatal(err)
			}
			res, err := r.VerifyStamped(stamp, time.Hour, later.Add(time.Minute))
			if !res.Hashed || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("VerifyStamped after the change = %+v, %v; want a full hash and ErrCorrupt", res, err)
			}
			if _, err := os.Stat(stamp); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("stamp kept after a failed hash: %v", err)
			}
		})
	}
}

// A full hash runs whenever the stamp cannot vouch for the tree.
func TestVerifyStampedHashesWhenStampCannotVouch(t *testing.T) {
	tests := []struct {
		name   string
		maxAge time.Duration
		after  time.Duration // since the first hash's time
		edit   func(stamp string) error
		why    string
	}{
		{"too old", time.Hour, 2 * time.Hour, nil, "rehashed every 1h0m0s"},
		{"every start", 0, time.Minute, nil, "every start"},
		{"clock set back", time.Hour, -time.Minute, nil, "from the future"},
		{"garbage", time.Hour, time.Minute, func(s string) error { return os.WriteFile(s, []byte("{nope"), 0o600) }, "stamp unreadable"},
		{"oversized", time.Hour, time.Minute, func(s string) error {
			return os.WriteFile(s, []byte(strings.Repeat(" ", maxStampBytes+1)), 0o600)
		}, "over 4096 bytes"},
		{"unknown field", time.Hour, time.Minute, func(s string) error {
			b, err := os.ReadFile(s)
			if err != nil {
				return err
			}
			return os.WriteFile(s, []byte(strings.Replace(string(b), "{", `{"trusted":true,`, 1)), 0o600)
		}, "stamp unreadable"},
		{"another tree's", time.Hour, time.Minute, func(s string) error {
			b, err := os.ReadFile(s)
			if err != nil {
				return err
			}
			return os.WriteFile(s, []byte(strings.Replace(string(b), `"content_hash":"sha256:`, `"content_hash":"sha256:0`, 1)), 0o600)
		}, "another tree"},
		{"symlink", time.Hour, time.Minute, func(s string) error {
			good := s + ".elsewhere"
			if err := os.Rename(s, good); err != nil {
				return err
			}
			return os.Symlink(good, s)
		}, "stamp unreadable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, stamp, later := stamped(t)
			if tt.edit != nil {
				if err := tt.edit(stamp); err != nil {
					t.Fatal(err)
				}
			}
			res, err := r.VerifyStamped(stamp, tt.maxAge, later.Add(tt.after))
			if err != nil || !res.Hashed || !strings.Contains(res.Why, tt.why) {
				t.Fatalf("VerifyStamped = %+v, %v; want a full hash because %q", res, err, tt.why)
			}
		})
	}
}

// A tree with an entry changed just before the scan gets no stamp: a second
// change in the same tick of the file system's clock would keep its ctime.
func TestVerifyStampedNoStampForFreshChanges(t *testing.T) {
	base, _ := sealed(t)
	r, err := Open(base)
	if err != nil {
		t.Fatal(err)
	}
	stamp := filepath.Join(t.TempDir(), "rootfs-verified.json")
	if res, err := r.VerifyStamped(stamp, time.Hour, time.Now()); err != nil || !res.Hashed {
		t.Fatalf("VerifyStamped = %+v, %v", res, err)
	}
	if _, err := os.Stat(stamp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stamp written for a tree changed %s ago: %v", time.Since(r.Manifest.BuiltAt), err)
	}
}
