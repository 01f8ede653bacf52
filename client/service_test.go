package client

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// The clients are tested against a real `jailcell serve` and a real
// `jailcell json`, built from this tree once per test run.

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// jailcellBinary builds cmd/jailcell with the seccomp tag, once.
func jailcellBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		buildDir, buildErr = os.MkdirTemp("", "jcbin")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "jailcell")
		out, err := exec.Command(goBin, "build", "-tags", "seccomp", "-o", buildBin, "github.com/jailcell/jailcell/cmd/jailcell").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/jailcell: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// lockedBuffer collects a child's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testConfig writes a small configuration rooted in dir and returns its
// path.
func testConfig(t *testing.T, dir string) string {
	t.Helper()
	r := testenv.Rootfs(t)
	cfg := fmt.Sprintf(`socket: %[1]s/run/j.sock
socket_group: root
state_dir: %[1]s/state
rootfs: %[2]s
log:
  level: info
sessions:
  max: 8
drain_grace: 20s
policies:
  default:
    memory_bytes: 256MiB
    pids: 64
    disk_bytes: 64MiB
`, dir, r.Root)
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// childEnv is a jailcell child's environment: nothing JAILCELL_* from the
// developer's shell, and failure memory of its own.
func childEnv(dir string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JAILCELL_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") && !strings.HasPrefix(kv, "LISTEN_") {
			env = append(env, kv)
		}
	}
	return append(append(env, "JAILCELL_REVIEW_DIR="+dir+"/review"), extra...)
}

type service struct {
	sock, dir, config string
	stderr            *lockedBuffer
}

// startService runs `jailcell serve` until the test ends, then checks it
// drains and exits 0.
func startService(t *testing.T) *service {
	t.Helper()
	testenv.RequiresRoot(t)
	bin := jailcellBinary(t)
	dir := testenv.StateDir(t)
	s := &service{sock: dir + "/run/j.sock", dir: dir, config: testConfig(t, dir), stderr: &lockedBuffer{}}
	cmd := exec.Command(bin, "serve", "--config", s.config)
	cmd.Env = childEnv(dir)
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve exited with %v after SIGTERM, want 0", err)
			}
		case <-time.After(40 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve still running 40s after SIGTERM")
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", s.stderr.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := net.Dial("unix", s.sock); err == nil {
			c.Close()
			return s
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited at start: %v\n%s", err, s.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen within 60s:\n%s", s.stderr.String())
		}
	}
}
