package api

import (
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestCoreImportsNoDoorLibrary keeps each front door's library inside its
// own package: api core is linked by every door and by the service, so a
// door's protocol library imported here would ride along into all of them.
func TestCoreImportsNoDoorLibrary(t *testing.T) {
	deps := testenv.GoList(t, "-deps", "github.com/jailcell/jailcell/api")
	// Each door's own package and protocol library: api core must reach
	// none of them, not even through another package.
	owners := []struct{ prefix, owner string }{
		{"github.com/go-zeromq/", "ZMQ belongs to api/jupyter alone"},
		{"github.com/modelcontextprotocol/go-sdk", "the MCP SDK belongs to api/mcp alone"},
		{"github.com/jailcell/jailcell/api/", "api core must not import a front door"},
	}
	for _, p := range deps {
		for _, o := range owners {
			if strings.HasPrefix(p, o.prefix) {
				t.Errorf("api imports %s: %s", p, o.owner)
			}
		}
	}
}

// TestImportsNoSandbox keeps the sandbox machinery out of api and its
// front doors: they reach session.Manager through Sessions and speak
// session/seam's types. isolate would link libcontainer and libseccomp
// (cgo) into every door and into `jailcell mcp` and `jailcell json` talking
// to a remote service, which build no sandbox.
func TestImportsNoSandbox(t *testing.T) {
	for _, pkg := range testenv.GoList(t, "github.com/jailcell/jailcell/api/...") {
		for _, p := range testenv.GoList(t, "-deps", pkg) {
			switch {
			case p == "github.com/jailcell/jailcell/session",
				p == "github.com/jailcell/jailcell/isolate",
				strings.HasPrefix(p, "github.com/jailcell/jailcell/isolate/"),
				strings.HasPrefix(p, "github.com/opencontainers/runc/libcontainer"),
				strings.HasPrefix(p, "github.com/seccomp/libseccomp-golang"):
				t.Errorf("%s imports %s: api reaches the Manager through Sessions", pkg, p)
			}
		}
	}
}
