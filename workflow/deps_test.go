package workflow

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoSandbox keeps workflow above the seam: the API links it, so
// session or isolate here would link libcontainer and libseccomp into every
// front door.
func TestImportsNoSandbox(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool on PATH to list workflow's dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-tags", "seccomp", "-deps", "github.com/jailcell/jailcell/workflow").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps workflow: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "github.com/jailcell/jailcell/session", "github.com/jailcell/jailcell/isolate":
			t.Errorf("workflow imports %s: it reaches the Manager through Sessions", p)
		}
	}
}
