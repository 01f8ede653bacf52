package isolate

import (
	"testing"

	"github.com/jailcell/jailcell/isolate/network"
)

// TestUplinkIndexDisjointDaemons: two daemons on one host with disjoint
// uid ranges plug their gateways into the same upstream namespace; their
// uplinks must never share a name or an address (each would remove the
// other's as stale), and the default range keeps its old names.
func TestUplinkIndexDisjointDaemons(t *testing.T) {
	if got := network.UplinkName(uplinkIndex(0x40000000)); got != "jcu0" {
		t.Errorf("default range, slot 0: %s, want jcu0", got)
	}
	seen := map[int]int{}
	for _, base := range []int{0x10000000, 0x40000000, 0x50000000, 0x60000000, 0xe0000000} {
		for slot := 0; slot < 4096; slot++ {
			idx := uplinkIndex(base + slot*idsPerSlot)
			if idx < 0 || idx > 0xffff {
				t.Fatalf("base %#x slot %d: index %d outside 0..65535", base, slot, idx)
			}
			if prev, ok := seen[idx]; ok {
				t.Fatalf("base %#x slot %d: index %d already used by host id %#x", base, slot, idx, prev)
			}
			seen[idx] = base + slot*idsPerSlot
			if n := network.UplinkName(idx); len(n) > 15 {
				t.Fatalf("link name %s over IFNAMSIZ", n)
			}
		}
	}
}
