package fleet

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The parts of the fleet test that need the nodes' shared store (S3 on a
// versitygw the test starts): a drained node's sessions moving to other
// nodes, and a killed node's sessions reported lost.

// migrateDrained: each session of the drained node answers its next cell
// from another node with its variables intact; the first such cell after
// the drain is the migration, timed and its bytes read from the drained
// node's log, for docs/fleet.md.
func migrateDrained(t *testing.T, f *fleet, drained []*sess) {
	t.Run("migration", func(t *testing.T) {
		var total time.Duration
		for _, s := range drained {
			start := time.Now()
			by, err := f.check(s)
			took := time.Since(start)
			if err != nil {
				t.Errorf("drained session: %v", err)
				continue
			}
			if by == s.node {
				t.Errorf("session %s answered by its drained node %s", s.id, by)
			}
			total += took
		}
		bytes := imageBytes(f.nodes["n1"].svc.Log.String())
		if len(drained) > 0 {
			t.Logf("FIGURES migration: %d sessions, mean first cell on another node %s, mean checkpoint image %d bytes",
				len(drained), (total / time.Duration(len(drained))).Round(time.Millisecond), bytes/int64(len(drained)))
		}
	})
}

// lostStates: each session of a node killed with -9, asked for on another
// node, says it was lost (the store's record names its node).
func lostStates(t *testing.T, replies map[*sess]*reply) {
	t.Run("lost state", func(t *testing.T) {
		for s, r := range replies {
			if r.Error == nil || r.Error.State != "lost" || !strings.Contains(r.Error.Message, s.node) {
				t.Errorf("session %s of a killed node: %s, want not_found with state lost naming node %s", s.id, r.raw, s.node)
			}
		}
	})
}

// imageBytes sums image_bytes of the "session hibernated" lines of a log.
func imageBytes(log string) int64 {
	var n int64
	for _, m := range regexp.MustCompile(`msg="session hibernated".* image_bytes=(\d+)`).FindAllStringSubmatch(log, -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n
}
