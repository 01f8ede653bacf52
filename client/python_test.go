package client

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestPythonClient runs the Python client's own tests and its example with
// the system python3 against a real `jailcell serve`.
func TestPythonClient(t *testing.T) {
	svc := startService(t)
	dir, err := filepath.Abs(filepath.Join("python"))
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.ChildEnv("JAILCELL_REVIEW_DIR="+svc.Dir+"/review", "JAILCELL_SOCKET="+svc.Sock, "PYTHONDONTWRITEBYTECODE=1")
	for _, args := range [][]string{
		{"-m", "unittest", "-v", "test_jailcell_client"},
		{"example.py"},
	} {
		cmd := exec.Command("/usr/bin/python3", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python3 %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "-m" && (!strings.Contains(string(out), "OK") || strings.Contains(string(out), "skipped")) {
			t.Fatalf("python3 %s did not run every test:\n%s", strings.Join(args, " "), out)
		}
		t.Logf("python3 %s:\n%s", strings.Join(args, " "), out)
	}
}
