package pyclient

import (
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// The Python client is tested against a real `jailcell serve` and a real
// `jailcell json`, built from this tree once per test run.

func TestMain(m *testing.M) { testenv.Main(m) }

// pyDir is the Python package's directory, from this package's.
const pyDir = "../../client/python"

// serviceConfig is a test service's configuration: in dir, small limits,
// info logs (the same as the Go client's tests use).
func serviceConfig(t *testing.T, dir string) string {
	return testenv.ServeConfig(dir, "root", testenv.Rootfs(t).Root) + `log:
  level: info
sessions:
  max: 8
drain_grace: 20s
policies:
  default:
    memory_bytes: 256MiB
    pids: 64
    disk_bytes: 64MiB
`
}
