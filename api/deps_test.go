package api

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreImportsNoDoorLibrary keeps each front door's library inside its
// own package: api core is linked by every door and by the service, so a
// door's protocol library imported here would ride along into all of them.
func TestCoreImportsNoDoorLibrary(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH to list api's dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-tags", "seccomp", "-deps", "github.com/jailcell/jailcell/api").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps api: %v\n%s", err, out)
	}
	// Each door's own package and protocol library: api core must reach
	// none of them, not even through another package.
	owners := []struct{ prefix, owner string }{
		{"github.com/go-zeromq/", "ZMQ belongs to api/jupyter alone"},
		{"github.com/modelcontextprotocol/go-sdk", "the MCP SDK belongs to api/mcp alone"},
		{"github.com/jailcell/jailcell/api/", "api core must not import a front door"},
	}
	for _, p := range strings.Fields(string(out)) {
		for _, o := range owners {
			if strings.HasPrefix(p, o.prefix) {
				t.Errorf("api imports %s: %s", p, o.owner)
			}
		}
	}
}
