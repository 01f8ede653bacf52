package isolate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
)

// TestHostileLocalUserCannotReachSandboxFiles: a sandbox's directory is
// searchable by root and the sandbox's own group only. With the daemon's
// mounts in the host's namespace (a daemon run without systemd), any
// local user read the workspace's files (0644 in 0755 directories) and
// reached the kernel's socket through 0711 directories. The sandbox itself
// still reaches its root and writes its workspace.
func TestHostileLocalUserCannotReachSandboxFiles(t *testing.T) {
	h := newTestHost(t)
	p := policy.Default()
	d := testDisk(t, h, p, "dirmode")
	logf, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	sb, err := d.Create(Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", "import os; os.makedirs('/work', exist_ok=True); open('/work/secret.txt', 'w').write('s3cret'); print('ok', flush=True)"},
		Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/", Log: logf})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { sb.Destroy() })
	select {
	case <-sb.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox did not finish")
	}
	if b, _ := os.ReadFile(logf.Name()); strings.TrimSpace(string(b)) != "ok" {
		t.Fatalf("the sandbox could not write its workspace: %q (%s)", b, sb.Exit())
	}
	secret := filepath.Join(d.UpperDir(), "work", "secret.txt")
	if b, err := os.ReadFile(secret); err != nil || string(b) != "s3cret" {
		t.Fatalf("the file the sandbox wrote: %q %v", b, err)
	}
	for _, path := range []string{secret, filepath.Join(d.CtlDir())} {
		cmd := exec.Command("ls", "-l", path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("uid 65534 reached %s: %s", path, out)
		}
	}
}
