package rootfs_test

import (
	"os"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/rootfs"
)

// legacyProfile is what a rootfs sealed before profiles asked for.
var legacyProfile = []string{"python3", "python3-numpy", "python3-pandas", "python3-matplotlib",
	"python3-openpyxl", "python3-pip", "python3-ipython"}

// TestProfileVersionsMatchHost: the conformance suite runs the same cells
// in a sandbox and in the host's ipykernel, so the Python packages the
// rootfs's profile asks for must be installed on the host at the very same
// Debian version (make deps installs them; a host upgraded after the
// rootfs was built, or the other way round, fails here).
func TestProfileVersionsMatchHost(t *testing.T) {
	r := testenv.Rootfs(t)
	if _, err := os.Stat("/var/lib/dpkg/status"); err != nil {
		t.Skipf("host has no dpkg database (not Debian-like): %v", err)
	}
	hostPy, host, err := rootfs.Inspect("/")
	if err != nil {
		t.Fatalf("read the host's dpkg database: %v", err)
	}
	have := make(map[string]string, len(host))
	for _, p := range host {
		have[p.Name] = p.Version
	}
	in := make(map[string]string, len(r.Manifest.Packages))
	for _, p := range r.Manifest.Packages {
		in[p.Name] = p.Version
	}
	asked := r.Manifest.ProfilePackages
	if len(asked) == 0 {
		asked = legacyProfile
	}
	if r.Manifest.PythonVersion != hostPy {
		t.Errorf("python: rootfs %s, host %s", r.Manifest.PythonVersion, hostPy)
	}
	checked := 0
	for _, name := range asked {
		if name != "python3" && !strings.HasPrefix(name, "python3-") {
			continue
		}
		checked++
		want, ok := in[name]
		if !ok {
			t.Errorf("%s: asked for by profile %q but not installed in the rootfs", name, r.Manifest.Profile)
			continue
		}
		got, ok := have[name]
		switch {
		case !ok:
			t.Errorf("%s: rootfs has %s, host has none (make deps installs it)", name, want)
		case got != want:
			t.Errorf("%s: rootfs has %s, host has %s: upgrade one side (apt-get install, make rootfs) so the conformance suite compares equal versions", name, want, got)
		}
	}
	if checked == 0 {
		t.Fatalf("profile %q asks for no Python package: %v", r.Manifest.Profile, asked)
	}
	t.Logf("rootfs %s (profile %q): compared %d Python packages with the host's", r.Manifest.Version, r.Manifest.Profile, checked)
}
