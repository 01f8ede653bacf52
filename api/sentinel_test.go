package api

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jailcell/jailcell/session/seam"
)

// Each session sentinel has exactly one wire code (one condition, one
// code), and none is left to "internal". What session passes on from
// below is one of these sentinels (session's TestHostSentinelsWrapped).
func TestSessionSentinelsOneCode(t *testing.T) {
	extra := []error{seam.ErrStateQuota, seam.ErrStoreQuota}
	for _, s := range append(seam.Sentinels(), extra...) {
		codes := map[string]bool{}
		for _, m := range errorCodes {
			if errors.Is(s, m.err) {
				codes[m.code] = true
			}
		}
		if len(codes) != 1 {
			t.Errorf("session sentinel %q has wire codes %v, want exactly one", s, codes)
		}
		if got := errorFor(fmt.Errorf("op: %w", s)).Code; got == CodeInternal || !codes[got] {
			t.Errorf("errorFor(%q) = %s, want its one code %v", s, got, codes)
		}
	}
}
