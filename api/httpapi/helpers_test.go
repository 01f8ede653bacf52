package httpapi

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/internal/doortest"
	"github.com/jailcell/jailcell/api/jsonl"
	"github.com/jailcell/jailcell/internal/sessiontest"
)

// A cgroup root of its own: starting a manager sweeps its root, and the
// session package's tests may run at the same time.
const integrationCgroupRoot = "/jailcell-test-api-http"

// The doors' shared test helpers (api/internal/doortest) and a real
// manager (internal/sessiontest), under the names these tests use.
var (
	testDispatcher = doortest.Dispatcher
	waitFor        = doortest.WaitFor
	scanLines      = doortest.ScanLines
	discardLogger  = doortest.DiscardLogger
	newTestManager = sessiontest.Manager
)

type (
	liveLine    = doortest.Line
	jsonlClient = doortest.JSONL
)

// startJSONL drives the JSON-lines door, which the contract test holds to
// the same answers as HTTP.
func startJSONL(t *testing.T, d *api.Dispatcher) *jsonlClient {
	return doortest.StartJSONL(t, func(ctx context.Context, r io.Reader, w io.Writer) error {
		return jsonl.Serve(ctx, r, w, d, jsonl.Options{})
	})
}

func readSeed(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		return nil, fmt.Errorf("%s: not a go test fuzz v1 file", path)
	}
	lit := strings.TrimSpace(lines[1])
	if !strings.HasPrefix(lit, "[]byte(") || !strings.HasSuffix(lit, ")") {
		return nil, fmt.Errorf("%s: want one []byte value", path)
	}
	s, err := strconv.Unquote(lit[len("[]byte(") : len(lit)-1])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return []byte(s), nil
}
