package session

import (
	"testing"

	"github.com/jailcell/jailcell/policy"
)

// TestConfigDefaults: a zero Config takes the exported defaults, the
// values cmd/jailcell's key table quotes (TestKeyDefaultsMatchComponentDefaults
// there), so a library caller and the service agree.
func TestConfigDefaults(t *testing.T) {
	c := Config{StateDir: t.TempDir()}
	c.defaults()
	for _, d := range []struct {
		field     string
		got, want any
	}{
		{"IdleTTL", c.IdleTTL, DefaultIdleTTL},
		{"MaxIdleTTL", c.MaxIdleTTL, DefaultMaxIdleTTL},
		{"MaxLifetime", c.MaxLifetime, DefaultMaxLifetime},
		{"HibernatedTTL", c.HibernatedTTL, DefaultHibernatedTTL},
		{"MaxHibernated", c.MaxHibernated, DefaultMaxHibernated},
	} {
		if d.got != d.want {
			t.Errorf("zero Config's %s = %v after defaults, want %v", d.field, d.got, d.want)
		}
	}
	// sessions.max "auto" is a zero MaxSessions: sized from the host.
	if want, _ := AutoMaxSessions(ReadHostCapacity(0), true, policy.Default().Pids); c.MaxSessions != want {
		t.Errorf("zero Config's MaxSessions = %d after defaults, want AutoMaxSessions' %d", c.MaxSessions, want)
	}
}
