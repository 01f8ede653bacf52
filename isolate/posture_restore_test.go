package isolate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v8/crit"
	criucore "github.com/checkpoint-restore/go-criu/v8/crit/images/criu-core"
	criuseccomp "github.com/checkpoint-restore/go-criu/v8/crit/images/seccomp"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/criu"
	"github.com/jailcell/jailcell/isolate/seccomp"
)

// editCoreImages rewrites the thread core (creds, seccomp) of every
// core-*.img in dir with edit, through go-criu's crit: what a store writer
// does to a hibernated session's images before a node restores them.
func editCoreImages(t *testing.T, dir string, edit func(tc *criucore.ThreadCoreEntry)) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "core-*.img"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no core images in %s: %v", dir, err)
	}
	for _, p := range paths {
		in, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := crit.New(in, nil, "", false, false).Decode(&criucore.CoreEntry{})
		in.Close()
		if err != nil {
			t.Fatalf("decode %s: %v", p, err)
		}
		for _, e := range img.Entries {
			tc := e.Message.(*criucore.CoreEntry).GetThreadCore()
			if tc == nil || tc.GetCreds() == nil {
				t.Fatalf("%s: no thread core with creds", p)
			}
			edit(tc)
		}
		writeImage(t, p, img)
	}
}

// editSeccompImage rewrites every filter program in dir's seccomp.img
// with prog, keeping the chain (count, order, flags): the thread cores
// still name the same filters, so the status fields read as before.
func editSeccompImage(t *testing.T, dir string, prog []byte) {
	t.Helper()
	p := filepath.Join(dir, "seccomp.img")
	in, err := os.Open(p)
	if err != nil {
		t.Fatalf("criu stores filters in seccomp.img: %v", err)
	}
	img, err := crit.New(in, nil, "", false, false).Decode(&criuseccomp.SeccompEntry{})
	in.Close()
	if err != nil {
		t.Fatalf("decode %s: %v", p, err)
	}
	n := 0
	for _, e := range img.Entries {
		for _, f := range e.Message.(*criuseccomp.SeccompEntry).GetSeccompFilters() {
			f.Filter = prog
			n++
		}
	}
	if n == 0 {
		t.Fatalf("%s holds no filter", p)
	}
	writeImage(t, p, img)
}

// writeImage encodes img over the image file p (through a temporary file:
// criu never reads half an image).
func writeImage(t *testing.T, p string, img *crit.CriuImage) {
	t.Helper()
	tmp := p + ".edit"
	out, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if err := crit.New(nil, out, "", false, false).Encode(img); err != nil {
		t.Fatalf("encode %s: %v", p, err)
	}
	out.Close()
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// allowAll is the BPF program "ret SECCOMP_RET_ALLOW", as criu stores a
// program: struct sock_filter, native byte order (little endian here).
var allowAll = []byte{unix.BPF_RET | unix.BPF_K, 0, 0, 0, 0x00, 0x00, 0xff, 0x7f}

// allowAllSum is how the check names a chain of one allowAll program:
// the error shows the very program criu restored from the edit.
func allowAllSum() string {
	prog := make([]unix.SockFilter, len(allowAll)/8)
	for i := range prog {
		b := allowAll[8*i:]
		prog[i] = unix.SockFilter{Code: uint16(b[0]) | uint16(b[1])<<8, Jt: b[2], Jf: b[3], K: uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24}
	}
	h := sha256.New()
	seccomp.HashProgram(h, prog)
	return seccomp.FilterSum{N: 1, Sum: hex.EncodeToString(h.Sum(nil))}.String()
}

// allCaps is every capability of this kernel (CAP_LAST_CAP 40) as criu's
// two 32-bit words: /proc shows it as 000001ffffffffff.
var allCaps = []uint32{0xffffffff, 0x1ff}

// TestRestoreRefusesEditedImagePosture: a checkpoint's
// core-*.img edited (as a store writer would) to turn seccomp off, to give
// every capability, or to clear no_new_privs, is restored by the real criu,
// and the posture check refuses it: the restore answers ErrPosture naming
// what differed, the restored processes are gone (the count they kept
// stops), and no cgroup or root mount is left; the same disk then restores
// the unedited checkpoint, which passes the check.
func TestRestoreRefusesEditedImagePosture(t *testing.T) {
	h := newTestHost(t)
	requiresCriu(t, h)
	d, spec, sb, ctl := counterSandbox(t, h, "edited")
	images := filepath.Join(t.TempDir(), "images")
	if err := sb.Checkpoint(images, false); err != nil {
		_ = sb.Destroy()
		t.Fatalf("Checkpoint: %v", err)
	}
	<-sb.Done()
	if err := sb.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	// The counter's /run/ctl is a host bind of this test's, not part of
	// the disk. A dump that caught n.tmp open needs it at each restore,
	// and a restored copy that ran before its check renamed it away: each
	// restore gets the bind's files as the dump left them.
	asDumped := criuCtl(t)
	copyCtl(t, ctl, asDumped, d.HostID())
	fromDump := func(t *testing.T) {
		t.Helper()
		for _, n := range []string{"n", "n.tmp"} {
			_ = os.Remove(filepath.Join(ctl, n))
		}
		copyCtl(t, asDumped, ctl, d.HostID())
	}
	attacks := []struct {
		name    string
		edit    func(tc *criucore.ThreadCoreEntry)
		seccomp []byte // seccomp.img's programs, replaced
		want    []string
	}{
		{"seccomp off", func(tc *criucore.ThreadCoreEntry) {
			tc.SeccompMode = criucore.SeccompMode_disabled.Enum()
			tc.SeccompFilter = nil
		}, nil, []string{"Seccomp 0, want 2"}},
		{"all capabilities", func(tc *criucore.ThreadCoreEntry) {
			c := tc.Creds
			c.CapEff, c.CapPrm, c.CapInh, c.CapBnd = allCaps, allCaps, allCaps, allCaps
		}, nil, []string{"CapEff 000001ffffffffff, want 0000000000000000", "CapBnd 000001ffffffffff"}},
		{"no_new_privs cleared", func(tc *criucore.ThreadCoreEntry) {
			zero := uint32(0)
			tc.Creds.NoNewPrivs = &zero
		}, nil, []string{"NoNewPrivs 0, want 1"}},
		{"all three at once", func(tc *criucore.ThreadCoreEntry) {
			zero := uint32(0)
			tc.SeccompMode = criucore.SeccompMode_disabled.Enum()
			tc.SeccompFilter = nil
			c := tc.Creds
			c.CapEff, c.CapPrm, c.CapInh, c.CapBnd = allCaps, allCaps, allCaps, allCaps
			c.NoNewPrivs = &zero
		}, nil, []string{"Seccomp 0, want 2", "CapEff 000001ffffffffff", "NoNewPrivs 0, want 1"}},
		// The same mode and filter count, but one program that allows
		// every call in place of the allowlist: only the programs differ.
		{"seccomp filter allows all", nil, allowAll, []string{"seccomp filter " + allowAllSum(), ", want 1 filter(s) sha256 "}},
	}
	for i, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			edited := filepath.Join(t.TempDir(), "images")
			if _, err := LinkImages(images, edited); err != nil {
				t.Fatal(err)
			}
			if a.edit != nil {
				editCoreImages(t, edited, a.edit)
			}
			if a.seccomp != nil {
				editSeccompImage(t, edited, a.seccomp)
			}
			fromDump(t)
			rs, err := d.Restore(edited, spec)
			if err == nil {
				_ = rs.Destroy()
				t.Fatalf("restore of images edited (%s) succeeded", a.name)
			}
			if !errors.Is(err, ErrPosture) {
				t.Fatalf("restore: %v, want ErrPosture (criu must restore the edit for the check to be tested)", err)
			}
			for _, w := range a.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if i == 0 || a.seccomp != nil {
				t.Logf("refused: %v", err)
			}
			if a.seccomp != nil && strings.Contains(err.Error(), "Seccomp") {
				t.Errorf("error %q names a status field: the edit must keep the mode and count, so that only the programs differ", err)
			}
			assertNothingLeft(t, h, d, ctl)
		})
	}
	// The stdio keys come with the images onto a line of criu's config:
	// words after a key would be options of criu's, run as root
	// (--action-script runs a command on the host).
	t.Run("stdio key with criu options", func(t *testing.T) {
		edited := filepath.Join(t.TempDir(), "images")
		if _, err := LinkImages(images, edited); err != nil {
			t.Fatal(err)
		}
		mark := filepath.Join(t.TempDir(), "ran")
		key := "file[1:2] --action-script /bin/touch " + mark
		if err := os.WriteFile(filepath.Join(edited, criu.StdioName), []byte(key+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fromDump(t)
		rs, err := d.Restore(edited, spec)
		if err == nil {
			_ = rs.Destroy()
			t.Fatal("restore of images whose stdio adds criu options succeeded")
		}
		if !errors.Is(err, ErrPosture) || !strings.Contains(err.Error(), "stdio") {
			t.Fatalf("restore: %v, want ErrPosture naming the stdio key", err)
		}
		if _, err := os.Stat(mark); err == nil {
			t.Fatal("the image's action script ran")
		}
		assertNothingLeft(t, h, d, ctl)
	})
	fromDump(t)
	rs, err := d.Restore(images, spec)
	if err != nil {
		t.Fatalf("restore of the unedited checkpoint on the same disk: %v", err)
	}
	t.Cleanup(func() { _ = rs.Destroy() })
	before := readCount(t, ctl)
	waitCount(t, ctl, before)
}

// assertNothingLeft: a refused restore left no cgroup, no mount of the
// sandbox's root, and no restored process (the count it kept stands
// still).
func assertNothingLeft(t *testing.T, h *Host, d *Disk, ctl string) {
	t.Helper()
	if ids := h.cgroupIDs(); len(ids) != 0 {
		t.Errorf("cgroups left by the refused restore: %v", ids)
	}
	mps, err := mountsUnder(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range mps {
		if mp != filepath.Join(d.dir, "disk") {
			t.Errorf("mount left by the refused restore: %s", mp)
		}
	}
	n := readCount(t, ctl)
	time.Sleep(200 * time.Millisecond)
	if m := readCount(t, ctl); m != n {
		t.Errorf("count moved %d -> %d: a restored process runs after the refusal", n, m)
	}
}
