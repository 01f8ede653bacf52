package isolate

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/internal/procfs"
	"github.com/jailcell/jailcell/isolate/network"
	"github.com/jailcell/jailcell/isolate/seccomp"
	"github.com/jailcell/jailcell/policy"
)

const execFromThreadEnv = "JAILCELL_TEST_EXEC_FROM_THREAD"

func init() {
	// Keep the main goroutine on the leader thread, so execFromThreadChild
	// can end that thread alone.
	if os.Getenv(execFromThreadEnv) == "1" {
		runtime.LockOSThread()
	}
}

// execFromThreadChild is what runc's init sometimes is right after a
// start: its leader thread gone (a zombie) while another thread is on its
// way to execve. Here the window is held open for half a second.
func execFromThreadChild() {
	go func() {
		runtime.LockOSThread() // any thread but the leader
		time.Sleep(500 * time.Millisecond)
		_ = unix.Exec("/bin/sleep", []string{"sleep", "30"}, nil)
		os.Exit(3)
	}()
	// End the leader thread only; the process lives on in the others.
	_, _, _ = unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0)
}

// The CI failure of stop 22: a sandbox's network was attached while its
// init was in execve from a non-leader thread; /proc/PID/ns/net answered
// ENOENT, the create failed and the init was left a zombie. The namespace
// is now opened once the exec completes, and a truly ended init is told
// apart from one in that window.
func TestSandboxNetnsWaitsOutExecFromThread(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), execFromThreadEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	for deadline := time.Now().Add(10 * time.Second); !leaderZombie(t, pid); {
		if time.Now().After(deadline) {
			t.Fatal("the child's leader thread never ended")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := netns.GetFromPid(pid); err == nil {
		t.Fatal("the window is not reproduced: ns/net opened while the leader is a zombie")
	}
	if procfs.Exited(pid) {
		t.Fatal("a zombie leader with live threads counted as an ended process")
	}
	ns, err := network.SandboxNetns(pid)
	if err != nil {
		t.Fatalf("sandboxNetns across the exec: %v", err)
	}
	defer ns.Close()
	self, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if !ns.Equal(self) {
		t.Fatalf("opened %v, the child is in %v", ns, self)
	}
	// The exec did happen: the kernel makes ns/net readable again when the
	// exec takes over the leader, a moment before it renames the task, so
	// the name is waited for, briefly (under load it lagged).
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child is %q 2 s after the namespace opened, want sleep", comm)
		}
	}

	// Killed and not yet reaped: a zombie with no thread left, ended.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !procfs.Exited(pid); {
		if time.Now().After(deadline) {
			t.Fatal("a killed child never counted as ended")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := network.SandboxNetns(pid); err == nil {
		t.Fatal("sandboxNetns opened the namespace of an ended process")
	}
	_ = cmd.Wait()
	waited = true
}

func leaderZombie(t *testing.T, pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("child gone: %v", err)
	}
	return strings.Contains(string(b), "\nState:\tZ")
}

// A create that fails after its init started (here: the egress upstream
// names no namespace) ends and reaps that init. Before, it stayed a zombie
// child of the daemon for good, and every later leak check saw it.
func TestFailedCreateReapsInit(t *testing.T) {
	h := newTestHost(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skipf("host lacks nft (%v): allowlist sandboxes cannot be built here", err)
	}
	h.SetEgress(Egress{Upstream: filepath.Join(t.TempDir(), "no-such-netns")})
	p := policy.Default()
	p.Network = policy.NetworkAllowlist
	p.Allow = &[]policy.Allow{{Host: "pypi.test", Ports: []uint16{8080}}}
	d, err := h.NewDisk("reap"+strconv.Itoa(time.Now().Nanosecond()), p)
	if err != nil {
		t.Fatalf("NewDisk: %v", err)
	}
	t.Cleanup(func() { _ = d.Destroy() })
	sb, err := d.Create(Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", "import time; time.sleep(60)"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/work"})
	if err == nil {
		_ = sb.Destroy()
		t.Fatal("Create succeeded with an egress upstream that does not exist")
	}
	if !strings.Contains(err.Error(), "egress upstream") {
		t.Fatalf("Create failed elsewhere than at the upstream: %v", err)
	}
	if kids := childrenOf(t, os.Getpid()); len(kids) > 0 {
		t.Fatalf("the failed create left children behind: %v", kids)
	}
}

// childrenOf lists pid's child processes ("pid state name").
func childrenOf(t *testing.T, pid int) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		f := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				f[k] = strings.TrimSpace(v)
			}
		}
		// The seccomp filter reader stays running on purpose, one for the
		// process (isolate/seccomp/filter.go), and is no sandbox's leftover.
		if f["PPid"] == strconv.Itoa(pid) && e.Name() != strconv.Itoa(seccomp.FilterReaderPid()) {
			out = append(out, e.Name()+" "+f["State"]+" "+f["Name"])
		}
	}
	return out
}
