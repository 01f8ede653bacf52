package isolate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClaimUIDRange: two daemons on one host cannot claim overlapping uid
// ranges; disjoint ones coexist; a released (or dead) claim frees its
// range; the default range may be shared with a warning only.
func TestClaimUIDRange(t *testing.T) {
	dir := t.TempDir()
	n := RangeSize(4096)
	a, err := ClaimUIDRange(dir, 0x40000000, n, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ClaimUIDRange(dir, 0x50000000, n, false)
	if err != nil {
		t.Fatalf("disjoint range refused: %v", err)
	}
	_, err = ClaimUIDRange(dir, 0x48000000, n, false)
	if !errors.Is(err, ErrUIDRangeTaken) || !strings.Contains(err.Error(), "sandbox.uid_base") {
		t.Fatalf("overlapping range: want ErrUIDRangeTaken naming sandbox.uid_base, got %v", err)
	}
	// A daemon on the default range beside another moves to the highest
	// free range instead of sharing host uids.
	c, err := ClaimUIDRange(dir, 0x40000000, n, true)
	if err != nil || len(c.Overlaps) != 0 || c.Base != 0xe0000000 {
		t.Fatalf("shareable claim beside a live one: %v, %+v; want the free range at 0xe0000000, no overlap", err, c)
	}
	c2, err := ClaimUIDRange(dir, 0x40000000, n, true)
	if err != nil || c2.Base != 0xd0000000 {
		t.Fatalf("second shareable claim: %v, %+v; want 0xd0000000", err, c2)
	}
	// Only with every range above it taken is the overlap shared, and said.
	var fill []*UIDClaim
	for b := 0x60000000; b <= 0xc0000000; b += n {
		f, err := ClaimUIDRange(dir, b, n, false)
		if err != nil {
			t.Fatal(err)
		}
		fill = append(fill, f)
	}
	c3, err := ClaimUIDRange(dir, 0x40000000, n, true)
	if err != nil || c3.Base != 0x40000000 || len(c3.Overlaps) != 1 {
		t.Fatalf("shareable claim with no free range: %v, %+v; want the default with one overlap reported", err, c3)
	}
	for _, f := range append(fill, c, c2, c3) {
		f.Close()
	}
	a.Close()
	a2, err := ClaimUIDRange(dir, 0x38000000, n, false)
	if err != nil {
		t.Fatalf("range freed by Close still refused: %v", err)
	}
	a2.Close()
	b.Close()
	// A claim file whose holder is gone (no lock held) is stale.
	stale := filepath.Join(dir, "uids-1073741824-1342177280.99999")
	if err := os.WriteFile(stale, []byte("99999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := ClaimUIDRange(dir, 0x40000000, n, false)
	if err != nil {
		t.Fatalf("stale claim refused a range: %v", err)
	}
	d.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale claim left in place: %v", err)
	}
	for _, bad := range [][2]int{{0, n}, {0x40000001, n}, {0xfff00000, n}} {
		if _, err := ClaimUIDRange(dir, bad[0], bad[1], false); err == nil {
			t.Errorf("range %#x+%d accepted", bad[0], bad[1])
		}
	}
}

// TestClaimStateRange: a state directory keeps the uid range of its first
// use across restarts; another daemon's first use avoids it while its own
// daemon is down; a live daemon on it is an error naming its pid, never a
// move; a configured base replaces the record; a reservation whose state
// directory is gone is dropped.
func TestClaimStateRange(t *testing.T) {
	claims, a, b := t.TempDir(), t.TempDir(), t.TempDir()
	n := RangeSize(0)
	const def = 0x40000000
	ca, err := ClaimStateRange(claims, a, def, n, false)
	if err != nil || ca.Base != def || ca.Recorded != 0 {
		t.Fatalf("first use: %v, %+v; want the default range, nothing recorded before", err, ca)
	}
	if rec, err := RecordedUIDBase(a); err != nil || rec != def {
		t.Fatalf("recorded range: %d, %v; want %d", rec, err, def)
	}
	ca.Close()
	// a's daemon is down (a restart): b's first use leaves its range alone.
	cb, err := ClaimStateRange(claims, b, def, n, false)
	if err != nil || cb.Base == def {
		t.Fatalf("first use beside a reserved range: %v, %+v; want another range", err, cb)
	}
	ca2, err := ClaimStateRange(claims, a, def, n, false)
	if err != nil || ca2.Base != def || ca2.Recorded != def {
		t.Fatalf("restart: %v, %+v; want the recorded range %d", err, ca2, def)
	}
	ca2.Close()
	cb.Close()
	// A live daemon holding the recorded range: an error naming its pid.
	other, err := ClaimUIDRange(claims, def, n, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ClaimStateRange(claims, a, def, n, false)
	if !errors.Is(err, ErrUIDRangeTaken) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(err.Error(), a) {
		t.Fatalf("restart onto a live daemon's range: %v; want ErrUIDRangeTaken naming pid %d and %s", err, os.Getpid(), a)
	}
	if rec, _ := RecordedUIDBase(a); rec != def {
		t.Fatalf("a refused start moved the record to %d", rec)
	}
	other.Close()
	// The operator's own base wins, and is the state dir's from then on.
	c, err := ClaimStateRange(claims, a, 0x50000000, n, true)
	if err != nil || c.Base != 0x50000000 || c.Recorded != def {
		t.Fatalf("configured base: %v, %+v", err, c)
	}
	c.Close()
	if rec, _ := RecordedUIDBase(a); rec != 0x50000000 {
		t.Fatalf("configured base not recorded: %d", rec)
	}
	// b's state dir is gone: its reservation goes at the next claim.
	if err := os.RemoveAll(b); err != nil {
		t.Fatal(err)
	}
	d, err := ClaimUIDRange(claims, 0x60000000, n, false)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	left, _ := filepath.Glob(filepath.Join(claims, "state-*"))
	if len(left) != 1 {
		t.Errorf("reservations left: %v; want a's only", left)
	}
	if err := os.WriteFile(filepath.Join(a, uidRangeFile), []byte("12\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ClaimStateRange(claims, a, def, n, false); err == nil || !strings.Contains(err.Error(), "not a uid base") {
		t.Errorf("corrupt record: %v; want an error naming it", err)
	}
}

// TestHostileClaimDirOfAnotherUser: the claim directory decides which host
// uids sandboxes run as. One another user made first (the tests' fixed
// name in /tmp) or may write let them hold the claims lock for good,
// delete running daemons' claims, or plant a link root wrote through (the
// state reservation). It is now refused, and a reservation replaces a
// planted link rather than writing through it.
func TestHostileClaimDirOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the directory is chowned to another user")
	}
	for _, tc := range []struct {
		name string
		uid  int
		mode os.FileMode
	}{{"another user's", 65534, 0o700}, {"writable by others", 0, 0o777}} {
		dir := filepath.Join(t.TempDir(), "claims")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chown(dir, tc.uid, tc.uid)
		os.Chmod(dir, tc.mode)
		if c, err := claimRange(dir, 1<<30, 1<<16, true, "/x"); err == nil {
			c.Close()
			t.Errorf("a claim dir %s: taken", tc.name)
		} else if !strings.Contains(err.Error(), "claim dir") {
			t.Errorf("a claim dir %s: %v, want it named", tc.name, err)
		}
	}
	dir := filepath.Join(t.TempDir(), "claims")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("untouched"), 0o600); err != nil {
		t.Fatal(err)
	}
	base, n := 1<<30, 1<<16
	if err := os.Symlink(target, filepath.Join(dir, fmt.Sprintf("state-%d-%d.%s", base, base+n, pathHash("/x")))); err != nil {
		t.Fatal(err)
	}
	c, err := claimRange(dir, base, n, true, "/x")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if b, _ := os.ReadFile(target); string(b) != "untouched" {
		t.Errorf("the reservation wrote through a planted link: target now %q", b)
	}
}
