package isolate

import "testing"

// TestConfigDefaults: a zero Config takes the exported defaults, the
// values cmd/jailcell's key table and wiring quote.
func TestConfigDefaults(t *testing.T) {
	var c Config
	c.defaults()
	if c.UIDBase != DefaultUIDBase {
		t.Errorf("zero Config's UIDBase = %#x after defaults, want %#x", c.UIDBase, DefaultUIDBase)
	}
	if c.CgroupRoot != DefaultCgroupRoot {
		t.Errorf("zero Config's CgroupRoot = %q after defaults, want %q", c.CgroupRoot, DefaultCgroupRoot)
	}
	if c.Criu != DefaultCriu {
		t.Errorf("zero Config's Criu = %q after defaults, want %q", c.Criu, DefaultCriu)
	}
}
