package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	if fi, err := os.Stat(stamp); err != nil || fi.Mode().Perm() != 0o600 || res.Unstamped != "" {
		t.Fatalf("stamp after a full hash: %v %v (unstamped: %q), want mode 0600", fi, err, res.Unstamped)
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
		{"another device", time.Hour, time.Minute, func(s string) error {
			b, err := os.ReadFile(s)
			if err != nil {
				return err
			}
			devRE := regexp.MustCompile(`"dev":([0-9]+)`)
			m := devRE.FindSubmatch(b)
			if m == nil {
				return fmt.Errorf("no dev in stamp %s", b)
			}
			dev, _ := strconv.ParseUint(string(m[1]), 10, 64)
			return os.WriteFile(s, devRE.ReplaceAll(b, []byte(`"dev":`+strconv.FormatUint(dev+1, 10))), 0o600)
		}, "the tree is on another device"},
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

// mapShared maps rel of the tree writable and shared, closes the descriptor
// (the mapping keeps the file open for writing) and dirties its first page
// without changing a byte: that first write moves the file's times, later
// ones to the same dirty page need not.
func mapShared(t *testing.T, root, rel string) []byte {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, rel), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	poke(b, 0, b[0])
	return b
}

// poke is one store the compiler cannot drop.
//
//go:noinline
func poke(b []byte, i int, v byte) { b[i] = v }

// The attack: a second service start after a file of the rootfs was
// changed through a writable MAP_SHARED mapping whose page was already
// dirty when the stamp was taken moved no time, so the stamp vouched for a
// corrupt tree. Now no stamp is written while the mapping exists, and the
// change is found by a full hash.
func TestVerifyStampedWritableMappingAttack(t *testing.T) {
	base, _ := sealed(t)
	r, err := Open(base)
	if err != nil {
		t.Fatal(err)
	}
	b := mapShared(t, r.Root, "usr/bin/su")
	stamp := filepath.Join(t.TempDir(), "rootfs-verified.json")
	later := time.Now().Add(10 * time.Second)
	res, err := r.VerifyStamped(stamp, time.Hour, later)
	want := fmt.Sprintf("usr/bin/su is open for writing: writable shared mapping by pid %d (", os.Getpid())
	if err != nil || !res.Hashed || !strings.Contains(res.Unstamped, want) {
		t.Fatalf("VerifyStamped with a writable mapping = %+v, %v; want a good hash and no stamp because %q", res, err, want)
	}
	if _, err := os.Stat(stamp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stamp written while %s: %v", res.Unstamped, err)
	}
	var before, after syscall.Stat_t
	p := filepath.Join(r.Root, "usr/bin/su")
	syscall.Stat(p, &before)
	poke(b, 0, 'S')
	syscall.Stat(p, &after)
	t.Logf("ctime moved by the write through the dirty page: %v", before.Ctim != after.Ctim)
	res, err = r.VerifyStamped(stamp, time.Hour, later.Add(time.Minute))
	if !res.Hashed || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("VerifyStamped after a write through the mapping = %+v, %v; want a full hash and ErrCorrupt", res, err)
	}
}

// A stamp that the tree's metadata matches does not vouch while a file of
// the tree is open for writing, as one written by an earlier version of
// this check, blind to mappings, would have been.
func TestVerifyStampedHashesWhileOpenForWriting(t *testing.T) {
	tests := []struct {
		name string
		open func(t *testing.T, root string) func()
		why  string
	}{
		{"writable shared mapping", func(t *testing.T, root string) func() {
			b := mapShared(t, root, "etc/pip.conf")
			return func() { unix.Munmap(b) }
		}, fmt.Sprintf("etc/pip.conf is open for writing: writable shared mapping by pid %d (", os.Getpid())},
		{"descriptor", func(t *testing.T, root string) func() {
			f, err := os.OpenFile(filepath.Join(root, "etc/pip.conf"), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			return func() { f.Close() }
		}, "etc/pip.conf is open for writing: no process in /proc maps it writable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, stamp, later := stamped(t)
			closeIt := tt.open(t, r.Root)
			forge := func() {
				t.Helper()
				nodes, err := scan(r.Root)
				if err != nil {
					t.Fatal(err)
				}
				digest, _ := statDigest(nodes)
				if err := writeStamp(stamp, verifyStamp{Version: stampVersion, Root: r.Root, ContentHash: r.Manifest.ContentHash,
					Dev: nodes[0].dev, StatDigest: digest, HashedAt: later}); err != nil {
					t.Fatal(err)
				}
			}
			forge()
			res, err := r.VerifyStamped(stamp, time.Hour, later.Add(time.Minute))
			if err != nil || !res.Hashed || !strings.Contains(res.Why, tt.why) || !strings.Contains(res.Unstamped, tt.why) {
				t.Fatalf("VerifyStamped = %+v, %v; want a full hash and no stamp because %q", res, err, tt.why)
			}
			// The same stamp vouches once the writer is gone: the writer
			// alone made the hash.
			closeIt()
			forge()
			if res, err := r.VerifyStamped(stamp, time.Hour, later.Add(time.Minute)); err != nil || res.Hashed {
				t.Fatalf("VerifyStamped with the writer gone = %+v, %v; want the stamp to vouch", res, err)
			}
		})
	}
}

// A file the check cannot lease (here swapped for a FIFO after the scan:
// no lease on a FIFO) fails closed: the stamp does not vouch.
func TestVerifyStampedWriterCheckFailsClosed(t *testing.T) {
	base, _ := sealed(t)
	r, err := Open(base)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := scan(r.Root)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(r.Root, "etc/empty")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if why := treeWriter(r.Root, nodes); !strings.HasPrefix(why, "cannot rule out a writable mapping of the tree: lease ") {
		t.Fatalf("treeWriter with a file it cannot lease = %q; want it to say it cannot rule one out", why)
	}
}

// mapsSeeds are /proc/PID/maps lines; want says whether each is a writable
// shared mapping of device fd:01, inode 1234.
var mapsSeeds = []struct {
	line string
	want bool
}{
	{"7f0000000000-7f0000001000 rw-s 00000000 fd:01 1234                       /r/usr/bin/su\n", true},
	{"7f0000000000-7f0000001000 rw-s 00000000 fd:01 1234                       /r/usr/bin/su (deleted)\n", true},
	{"7f0000000000-7f0000001000 -w-s 00000000 fd:01 1234 /a path with spaces\n", true},
	{"7f0000000000-7f0000001000 rw-p 00000000 fd:01 1234 /r/usr/bin/su\n", false},
	{"7f0000000000-7f0000001000 r--s 00000000 fd:01 1234 /r/usr/bin/su\n", false},
	{"7f0000000000-7f0000001000 rw-s 00000000 fd:02 1234 /r/usr/bin/su\n", false},
	{"7f0000000000-7f0000001000 rw-s 00000000 fd:01 12345 /r/usr/bin/su\n", false},
	{"7f0000000000-7f0000001000 rw-s 00000000 00:01 1234 /dev/zero (deleted)\n", false},
	{"7f0000000000-7f0000001000 rw-s 00000000 fd01 1234\n", false},
	{"7f0000000000-7f0000001000 rw-s 00000000 fd:01\n", false},
	{"rw-s\n", false},
	{"", false},
}

func TestSharedWritable(t *testing.T) {
	dev := unix.Mkdev(0xfd, 0x01)
	for _, tt := range mapsSeeds {
		if got := sharedWritable([]byte(tt.line), dev, 1234); got != tt.want {
			t.Errorf("sharedWritable(%q) = %v, want %v", tt.line, got, tt.want)
		}
	}
}

func FuzzSharedWritable(f *testing.F) {
	for _, tt := range mapsSeeds {
		f.Add([]byte(tt.line))
	}
	dev := unix.Mkdev(0xfd, 0x01)
	f.Fuzz(func(t *testing.T, line []byte) {
		sharedWritable(line, dev, 1234)
	})
}

// The search of /proc that names a mapping's holder stops at its bounds and
// then names none; the file is reported all the same.
func TestHolderBounded(t *testing.T) {
	r, _, later := stamped(t)
	mapShared(t, r.Root, "etc/pip.conf")
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(r.Root, "etc/pip.conf"), &st); err != nil {
		t.Fatal(err)
	}
	if h := procMaps.holder(st.Dev, st.Ino); h != fmt.Sprintf("pid %d (%s)", os.Getpid(), procComm(t)) {
		t.Fatalf("holder = %q, want this process", h)
	}
	for _, b := range []procScan{{proc: "/proc", maxProcs: 0, maxLines: 1 << 20}, {proc: "/proc", maxProcs: 1 << 16, maxLines: 0}} {
		if h := b.holder(st.Dev, st.Ino); h != "" {
			t.Errorf("holder with bounds %+v = %q, want none", b, h)
		}
	}
	defer func(old procScan) { procMaps = old }(procMaps)
	procMaps.maxLines = 0
	res, err := r.VerifyStamped(filepath.Join(t.TempDir(), "s.json"), time.Hour, later)
	if err != nil || !strings.Contains(res.Unstamped, "etc/pip.conf is open for writing: no process in /proc maps it writable") {
		t.Fatalf("VerifyStamped with the holder search bounded to nothing = %+v, %v", res, err)
	}
}

func procComm(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
