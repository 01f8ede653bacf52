package testenv

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
)

// The one harness for tests that need a real `jailcell serve`: the
// command's own tests (the test binary re-executed as jailcell), the
// clients' tests and the soak test (a binary built from this tree).

// LockedBuffer collects a child's stderr while the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail is the last n lines of the buffer, saying how many came before: a
// failed test prints a server's log this way, so a request log of
// thousands of lines does not bury the failure above it.
func (l *LockedBuffer) Tail(n int) string {
	lines := strings.SplitAfter(l.String(), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) <= n {
		return strings.Join(lines, "")
	}
	return fmt.Sprintf("[%d earlier lines left out]\n", len(lines)-n) + strings.Join(lines[len(lines)-n:], "")
}

// ChildEnv is a jailcell child's environment: nothing JAILCELL_* or
// systemd's from the developer's shell, the hermetic configuration
// (HermeticEnv), then extra (which may name another JAILCELL_CONFIG).
func ChildEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JAILCELL_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") && !strings.HasPrefix(kv, "LISTEN_") {
			env = append(env, kv)
		}
	}
	return append(append(env, HermeticEnv()...), extra...)
}

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// Jailcell builds cmd/jailcell with the seccomp tag once per test binary
// and returns its path. A package that calls it removes the build with
// RemoveBuild in its TestMain.
func Jailcell(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		if buildDir, buildErr = os.MkdirTemp("", "jcbin"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "jailcell")
		out, err := exec.Command(goBin, "build", "-tags", "seccomp", "-o", buildBin, "github.com/jailcell/jailcell/cmd/jailcell").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build cmd/jailcell: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// Main runs a package's tests and removes what Jailcell built for them:
// the TestMain of every package that runs the real binary.
func Main(m *testing.M) {
	Hermetic()
	code := m.Run()
	RemoveBuild()
	os.Exit(code)
}

// RemoveBuild removes what Jailcell built, if anything. The hermetic
// configuration stays: it is one file for every test process on the host.
func RemoveBuild() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// DefaultPolicy is the `default` entry under `policies:` of a test
// service: small enough that many sandboxes fit on a shared test machine.
const DefaultPolicy = `  default:
    memory_bytes: 256MiB
    pids: 64
    disk_bytes: 64MiB
    output_bytes: 64KiB
    interrupt_grace: 1s
`

// ClientServeConfig is a client test's service configuration: in dir,
// small limits, info logs; the Go and Python clients' tests share it.
func ClientServeConfig(t testing.TB, dir string) string {
	return ServeConfig(dir, "root", Rootfs(t).Root) + `log:
  level: info
sessions:
  max: 8
drain_grace: 20s
policies:
  default:
    memory_bytes: 256MiB
    pids: 64
    disk_bytes: 64MiB
`
}

// ServeConfig is the part of a test service's configuration that says
// where it lives: the socket and state under dir, the built rootfs. The
// rest (logs, sessions, policies) is the caller's.
func ServeConfig(dir, group, rootfs string) string {
	return fmt.Sprintf("socket: %[1]s/run/j.sock\nsocket_group: %[2]s\nstate_dir: %[1]s/state\nrootfs: %[3]s\n", dir, group, rootfs)
}

// Serve says how to start a test service.
type Serve struct {
	// Bin is the jailcell binary; default os.Args[0], for a test binary
	// that becomes jailcell when Env holds its switch.
	Bin string
	// Env is added to ChildEnv and JAILCELL_REVIEW_DIR (the workflow's
	// failure memory is per test, not the host's).
	Env []string
	// Config is the YAML after ServeConfig's keys.
	Config func(dir string) string
	// StopWait is how long Stop waits after SIGTERM; default 40 s.
	StopWait time.Duration
	// CleanExit fails the test at cleanup unless serve exits 0 on SIGTERM.
	CleanExit bool
}

// Service is a running `jailcell serve`.
type Service struct {
	t      testing.TB
	opts   Serve
	Dir    string // the test's directory: config, run/, state/, review/
	Sock   string
	State  string
	Config string // the config file's path
	Cmd    *exec.Cmd
	Log    *LockedBuffer // serve's stderr
	done   chan struct{}
	err    error
}

// StartServe starts `jailcell serve` with o's configuration in a fresh
// directory and waits until its socket answers. It is stopped (SIGTERM)
// when the test ends, and its log printed if the test failed.
func StartServe(t testing.TB, o Serve) *Service {
	t.Helper()
	RequiresRoot(t)
	dir := StateDir(t)
	s := &Service{Dir: dir, Config: filepath.Join(dir, "config.yaml")}
	body := ""
	if o.Config != nil {
		body = o.Config(dir)
	}
	if err := os.WriteFile(s.Config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return s.launch(t, o, nil)
}

// Restart starts another serve on s's directory and configuration, as a
// restarted service: s's options, and env added to them (not to s's own
// extra environment).
func (s *Service) Restart(t testing.TB, env ...string) *Service {
	t.Helper()
	return (&Service{Dir: s.Dir, Config: s.Config}).launch(t, s.opts, env)
}

func (s *Service) launch(t testing.TB, o Serve, env []string) *Service {
	t.Helper()
	if o.Bin == "" {
		o.Bin = os.Args[0]
	}
	if o.StopWait == 0 {
		o.StopWait = 40 * time.Second
	}
	s.t, s.opts = t, o
	s.Sock, s.State = filepath.Join(s.Dir, "run", "j.sock"), filepath.Join(s.Dir, "state")
	s.Log, s.done = &LockedBuffer{}, make(chan struct{})
	s.Cmd = exec.Command(o.Bin, "serve", "--config", s.Config)
	s.Cmd.Env = ChildEnv(append(append([]string{"JAILCELL_REVIEW_DIR=" + s.Dir + "/review"}, o.Env...), env...)...)
	s.Cmd.Stderr = s.Log
	// A restart finds the previous run's socket file until the new
	// process replaces it: only a socket file that was not there before
	// this start says the new process listens. A CI run once took a
	// connect for readiness and had its first request refused before the
	// new process listened.
	stale := socketID(s.Sock)
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = s.Cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		if err := s.Stop(); err != nil && o.CleanExit {
			t.Errorf("serve exited with %v after SIGTERM, want 0", err)
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", s.Log.String())
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; {
		if id := socketID(s.Sock); id != "" && id != stale {
			if c, err := net.Dial("unix", s.Sock); err == nil {
				c.Close()
				return s
			}
		}
		select {
		case <-s.done:
			t.Fatalf("serve exited at start: %v\n%s", s.err, s.Log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen within 60s:\n%s", s.Log.String())
		}
	}
}

// socketID names the file at path by inode and change time ("" if there
// is none), so a replaced socket differs even when its inode is reused.
func socketID(path string) string {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d.%d", st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
}

// WriteConfig replaces the configuration file (for a reload or restart).
func (s *Service) WriteConfig(t testing.TB, yaml string) {
	t.Helper()
	if err := os.WriteFile(s.Config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Stop sends SIGTERM, waits up to StopWait (then kills it and fails the
// test) and returns how serve exited. Stopping a stopped service only
// returns its exit.
func (s *Service) Stop() error {
	select {
	case <-s.done:
		return s.err
	default:
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(s.opts.StopWait):
		_ = s.Cmd.Process.Kill()
		<-s.done
		s.t.Errorf("serve did not stop within %s of SIGTERM", s.opts.StopWait)
	}
	return s.err
}

// Done is closed when serve has exited; Err is then its exit.
func (s *Service) Done() <-chan struct{} { return s.done }

// Err is how serve exited, once Done is closed.
func (s *Service) Err() error { return s.err }

// WaitLog waits up to 15 s for a log line containing every part and
// returns it, or fails the test.
func (s *Service) WaitLog(t testing.TB, parts ...string) string {
	t.Helper()
	return s.WaitLogWithin(t, 15*time.Second, parts...)
}

// WaitLogWithin is WaitLog with its own bound, for a line that follows
// slow work (a rootfs hash on a loaded host).
func (s *Service) WaitLogWithin(t testing.TB, within time.Duration, parts ...string) string {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, line := range strings.Split(s.Log.String(), "\n") {
			ok := true
			for _, part := range parts {
				ok = ok && strings.Contains(line, part)
			}
			if ok {
				return line
			}
		}
	}
	t.Fatalf("no log line with %q within %s:\n%s", parts, within, s.Log.String())
	return ""
}
