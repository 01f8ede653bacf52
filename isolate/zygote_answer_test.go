package isolate

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestZygoteAnswerForAnotherRequestBreaksIt: an answer on the zygote's
// socket that does not carry the request's nonce (queued by code that
// reached the socket, or late for an earlier request) is not taken as
// this fork's pid; the zygote is marked broken, so no later request reads
// a shifted answer.
func TestZygoteAnswerForAnotherRequestBreaksIt(t *testing.T) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	z := &Zygote{ctl: os.NewFile(uintptr(sp[0]), "ctl"), log: &lockedBuffer{}}
	defer z.ctl.Close()
	peer := os.NewFile(uintptr(sp[1]), "zygote")
	defer peer.Close()
	go func() {
		buf := make([]byte, 1<<16)
		if _, err := peer.Read(buf); err != nil {
			return
		}
		b, _ := json.Marshal(map[string]any{"pid": os.Getpid(), "nonce": "an earlier request's"})
		peer.Write(b)
	}()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	pid, err := z.request([]byte(`{"op":"fork"}`), "this request's", []int{int(null.Fd())})
	if err == nil {
		t.Fatalf("request took pid %d from an answer with another nonce", pid)
	}
	if z.broken == nil {
		t.Errorf("an answer to another request left the zygote usable: %v", err)
	}
}

// TestForkRefusesForeignPid: a pid the zygote answers is checked to be its
// fork before the daemon writes its maps, joins it to a cgroup or kills it
// on failure. Before the check, a host process (or another session's
// init) answered by a zygote was killed and reaped by the daemon.
func TestForkRefusesForeignPid(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: user namespaces of other processes are read through /proc")
	}
	start := func(t *testing.T, args ...string) *exec.Cmd {
		t.Helper()
		c := exec.Command(args[0], args[1:]...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	check := func(pid int) error {
		p, err := os.FindProcess(pid)
		if err != nil {
			t.Fatal(err)
		}
		// This test process stands for the zygote: forks of it are in user
		// namespaces whose parent is the initial one.
		return isForkOf(os.Getpid(), pid, p)
	}
	alive := func(pid int) bool { return syscall.Kill(pid, 0) == nil }

	t.Run("not the daemon's child", func(t *testing.T) {
		out, _ := exec.Command("sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!").Output()
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Kill(pid, syscall.SIGKILL)
		if err := check(pid); err == nil || !strings.Contains(err.Error(), "not this daemon's child") {
			t.Errorf("a stranger's pid: %v, want refused as not our child", err)
		}
		if !alive(pid) {
			t.Errorf("the stranger %d was ended", pid)
		}
	})
	t.Run("a child in the host's user namespace", func(t *testing.T) {
		c := start(t, "sleep", "60")
		if err := check(c.Process.Pid); err == nil {
			t.Error("a child outside any new user namespace was taken as a fork")
		}
	})
	t.Run("a child whose ids are mapped", func(t *testing.T) {
		// Another session's init: a child of the zygote, maps written.
		c := start(t, "unshare", "--user", "--map-root-user", "sleep", "60")
		waitUserns(t, c.Process.Pid)
		if err := check(c.Process.Pid); err == nil || !strings.Contains(err.Error(), "mapped") {
			t.Errorf("a child with its maps: %v, want refused as mapped", err)
		}
	})
	t.Run("a fork as the zygote makes it", func(t *testing.T) {
		c := start(t, "unshare", "--user", "sleep", "60")
		waitUserns(t, c.Process.Pid)
		if err := check(c.Process.Pid); err != nil {
			t.Errorf("a child in a new, unmapped user namespace: %v, want taken", err)
		}
	})
}

// waitUserns waits until pid has left the initial user namespace (unshare
// has run).
func waitUserns(t *testing.T, pid int) {
	t.Helper()
	self, _ := os.Readlink("/proc/self/ns/user")
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/user"); err == nil && ns != self {
			if m, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(m)) == "sleep" {
				return
			}
		}
	}
	t.Fatalf("pid %d never ran sleep in a user namespace of its own", pid)
}
