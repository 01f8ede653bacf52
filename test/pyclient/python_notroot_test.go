package pyclient

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// The test user: not root, admitted by the service through its groups (the
// socket's group and an allowed gid), as a member of group jailcell is. No
// host user or group is made: the ids only have to be numbers.
const (
	notRootSocketGID  = 64133
	notRootAllowedGID = 64134
)

var notRoot = &syscall.Credential{Uid: 65534, Gid: notRootAllowedGID, Groups: []uint32{notRootSocketGID}}

// notRootScript drives the service through the installed package, as the
// test user, over both transports (the socket; `jailcell json`, which finds
// the running service and talks to it as that user, no root, no lock),
// synchronously and with asyncio.
const notRootScript = `
import asyncio, base64, os, sys
from jailcell import Sandbox, AsyncSandbox
sock, jc = sys.argv[1], sys.argv[2]
plot = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"
def check(name, sbx_run):
    shown = []
    ex = sbx_run("x = 41")
    assert ex.error is None, (name, ex.error)
    ex = sbx_run("x + 1")
    assert ex.text == "42", (name, ex.text)
    ex = sbx_run(plot, shown)
    assert shown and base64.b64decode(shown[0].png)[:8] == b"\x89PNG\r\n\x1a\n", (name, shown)
    print(name, "ok")
for name, kw in (("socket", {"socket": sock}), ("json", {"command": [jc, "json", "--connect=" + sock]})):
    with Sandbox(**kw) as sbx:
        check("sync " + name, lambda code, shown=None: sbx.run_code(code, on_result=(shown.append if shown is not None else None)))
async def main():
    for name, kw in (("socket", {"socket": sock}), ("json", {"command": [jc, "json", "--connect=" + sock]})):
        async with await AsyncSandbox.create(**kw) as sbx:
            results = {}
            for code in ("x = 41", "x + 1", plot):
                shown = []
                async def on_result(r, shown=shown):
                    shown.append(r)
                results[code] = (await sbx.run_code(code, on_result=on_result), shown)
            assert results["x + 1"][0].text == "42", results["x + 1"][0].text
            shown = results[plot][1]
            assert shown and base64.b64decode(shown[0].png)[:8] == b"\x89PNG\r\n\x1a\n", shown
            print("async", name, "ok")
asyncio.run(main())
print("uid", os.getuid())
`

// startNotRootService starts a service that admits notRoot by its groups.
func startNotRootService(t *testing.T) *testenv.Service {
	t.Helper()
	return testenv.StartServe(t, testenv.Serve{
		Bin:       testenv.Jailcell(t),
		CleanExit: true,
		Config: func(d string) string {
			cfg := testenv.ClientServeConfig(t, d)
			if !strings.Contains(cfg, "socket_group: root\n") {
				t.Fatalf("the test service's configuration changed: no socket_group to replace in\n%s", cfg)
			}
			return strings.Replace(cfg, "socket_group: root\n", fmt.Sprintf("socket_group: %q\n", fmt.Sprint(notRootSocketGID)), 1) +
				fmt.Sprintf("allowed_gids: [%d]\n", notRootAllowedGID)
		},
	})
}

// binForNotRoot returns a directory the test user can read, holding a copy
// of the jailcell binary (the built one's directory is root's alone), and
// that copy's path.
func binForNotRoot(t *testing.T) (dir, bin string) {
	t.Helper()
	dir = testenv.StateDir(t)
	bin = filepath.Join(dir, "jailcell")
	b, err := os.ReadFile(testenv.Jailcell(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

// TestPythonNotRoot: a user who is not root but is admitted by the running
// service's group drives it from the installed Python package, through
// both transports, sync and async (TestPythonQuickstarts runs the
// quickstarts as that user too).
func TestPythonNotRoot(t *testing.T) {
	python := installPythonFor(t, true)
	dir, bin := binForNotRoot(t)
	script := filepath.Join(dir, "notroot.py")
	if err := os.WriteFile(script, []byte(notRootScript), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := startNotRootService(t)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(python, args...)
		cmd.Dir = dir
		cmd.Env = append(pipEnv("HOME="+dir, "JAILCELL_SOCKET="+svc.Sock), "PATH="+dir+":/usr/bin:/bin")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: notRoot}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python %s as uid %d: %v\n%s", strings.Join(args, " "), notRoot.Uid, err, out)
		}
		return string(out)
	}
	out := run(script, svc.Sock, bin)
	for _, want := range []string{"sync socket ok", "sync json ok", "async socket ok", "async json ok", fmt.Sprintf("uid %d", notRoot.Uid)} {
		if !strings.Contains(out, want) {
			t.Errorf("as a user of the group, %q missing:\n%s", want, out)
		}
	}
	// The sandboxes ended with the user's sandboxes.
	if ls := run("-c", "import jailcell, sys; print(len(jailcell.Client(sys.argv[1]).sessions()))", svc.Sock); strings.TrimSpace(ls) != "0" {
		t.Errorf("the test user's sessions left: %s", ls)
	}
}
