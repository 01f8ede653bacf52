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
