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

// loadedCell loads a session's kernel the way an agent's work does
// (numpy, pandas, a 200,000 x 4 frame of float64: 6.4 MB) and prints a
// digest of the frame that only the same frame gives again.
const loadedCell = `import numpy as np, pandas as pd
df = pd.DataFrame(np.random.default_rng(7).random((200_000, 4)), columns=list("abcd"))
print(df.shape, round(float(df.to_numpy().sum()), 6))`

// migrateDrained: each session of the drained node answers its next cell
// from another node with its variables intact; the first such cell after
// the drain is the migration, timed and its bytes read from the drained
// node's log, for docs/fleet.md. loaded ran loadedCell before the drain
// (which printed sig): its frame must come back whole, and its migration
// is reported on its own.
func migrateDrained(t *testing.T, f *fleet, drained []*sess, loaded *sess, sig string) {
	t.Run("migration", func(t *testing.T) {
		var total time.Duration
		var plain int
		log := f.nodes["n1"].svc.Log.String()
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
			if s != loaded {
				total += took
				plain++
				continue
			}
			st, _, r := f.exec(s, `print(df.shape, round(float(df.to_numpy().sum()), 6))`)
			if st != 200 || r.Result == nil || r.Result.Stdout != sig {
				t.Errorf("loaded session %s after its migration: %d %s, want its frame back (%q)", s.id, st, r.raw, sig)
			}
			t.Logf("FIGURES migration, loaded session (numpy, pandas, a 6.4 MB frame): first cell on another node %s, checkpoint image %d bytes",
				took.Round(time.Millisecond), imageBytes(log, s.id))
		}
		// Moved sessions keep answering: HAProxy sends their later
		// requests to the node that restored them (it learned it from that
		// answer), not to whichever node is least loaded.
		for _, s := range drained {
			for range 2 {
				if by, err := f.check(s); err != nil {
					t.Errorf("moved session, a later cell: %v (answered by %q)", err, by)
					break
				}
			}
		}
		if plain > 0 {
			t.Logf("FIGURES migration: %d plain sessions, mean first cell on another node %s, mean checkpoint image %d bytes",
				plain, (total / time.Duration(plain)).Round(time.Millisecond), (imageBytes(log, "")-imageBytes(log, loaded.id))/int64(plain))
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

// imageBytes sums image_bytes of the "session hibernated" lines of a log,
// of session id only unless id is "".
func imageBytes(log, id string) int64 {
	var n int64
	for _, m := range regexp.MustCompile(`msg="session hibernated" session=(\S+).* image_bytes=(\d+)`).FindAllStringSubmatch(log, -1) {
		if id != "" && m[1] != id {
			continue
		}
		v, _ := strconv.ParseInt(m[2], 10, 64)
		n += v
	}
	return n
}
