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

// TestImportsNoSandbox keeps the sandbox machinery out of api and its
// front doors: they reach session.Manager through Sessions and speak
// session/seam's types. isolate would link libcontainer and libseccomp
// (cgo) into every door and into `jailcell mcp` and `jailcell json` talking
// to a remote service, which build no sandbox.
func TestImportsNoSandbox(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH to list api's dependencies: %v", err)
	}
	pkgs, err := exec.Command(goTool, "list", "-tags", "seccomp", "github.com/jailcell/jailcell/api/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list api/...: %v\n%s", err, pkgs)
	}
	for _, pkg := range strings.Fields(string(pkgs)) {
		out, err := exec.Command(goTool, "list", "-tags", "seccomp", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, p := range strings.Fields(string(out)) {
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
