package isolate

import (
	"errors"
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
