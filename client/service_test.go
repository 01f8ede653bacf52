package client

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// The clients are tested against a real `jailcell serve` and a real
// `jailcell json`, built from this tree once per test run.

func TestMain(m *testing.M) { testenv.Main(m) }

// testConfig writes the configuration of a service rooted in dir and
// returns its path.
func testConfig(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(testenv.ClientServeConfig(t, dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startService runs `jailcell serve` until the test ends, then checks it
// drains and exits 0.
func startService(t *testing.T) *testenv.Service {
	t.Helper()
	return testenv.StartServe(t, testenv.Serve{
		Bin:       testenv.Jailcell(t),
		CleanExit: true,
		Config:    func(dir string) string { return testenv.ClientServeConfig(t, dir) },
	})
}
