package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// aptSandbox makes apt configuration of the test's own: package lists and a
// cache in a temporary directory, no sources (so `update` fetches nothing),
// and the wrapper's own lock file there too. It returns the environment for
// scripts/apt-get.sh and the lists' lock file.
func aptSandbox(t *testing.T) (env []string, listsLock, wrapperLock string) {
	t.Helper()
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skipf("requires apt-get, which this host lacks (%v): the wrapper is for Debian hosts", err)
	}
	testenv.RequiresRoot(t) // apt-get update runs as root (it drops to _apt to fetch)
	d := t.TempDir()
	// _apt reads the lists' directory (apt warns when it cannot).
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"lists/partial", "cache/archives/partial", "sources.list.d"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(d, "apt.conf")
	body := "Dir::State::Lists \"" + d + "/lists\";\nDir::Cache \"" + d + "/cache\";\n" +
		"Dir::Etc::SourceList \"/dev/null\";\nDir::Etc::SourceParts \"" + d + "/sources.list.d\";\n"
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	wrapperLock = filepath.Join(d, "wrapper.lock")
	env = append(os.Environ(), "APT_CONFIG="+conf, "JAILCELL_APT_LOCK="+wrapperLock, "APT_LOCK_WAIT=60")
	return env, filepath.Join(d, "lists", "lock"), wrapperLock
}

// holdFcntl takes the write lock apt takes on path (fcntl, F_SETLK) in this
// process and lets it go after d.
func holdFcntl(t *testing.T, path string, d time.Duration) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(d, func() { f.Close() }) // closing drops the lock
}

func runWrapper(t *testing.T, env []string, args ...string) (time.Duration, string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "apt-get.sh"), args...)
	cmd.Env = env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return time.Since(start), string(out), err
}

// TestAptWrapperWaits: scripts/apt-get.sh waits for the package lists' lock
// held by another apt (which bookworm's apt-get update, even with
// DPkg::Lock::Timeout, fails on at once: it failed CI on a fresh machine),
// and for another of this project's apt runs.
func TestAptWrapperWaits(t *testing.T) {
	env, listsLock, wrapperLock := aptSandbox(t)
	const hold = 3 * time.Second

	// The failure the wrapper exists for: plain apt-get does not wait.
	holdFcntl(t, listsLock, hold)
	plain := exec.Command("apt-get", "-o", "DPkg::Lock::Timeout=60", "update", "-qq")
	plain.Env = env
	if out, err := plain.CombinedOutput(); err == nil || !strings.Contains(string(out), "Could not get lock") {
		t.Fatalf("plain apt-get update with the lists locked: %v, %s; want it to fail on the lock (else this test proves nothing)", err, out)
	}
	took, out, err := runWrapper(t, env, "update", "-qq")
	if err != nil {
		t.Fatalf("apt-get.sh update with the lists locked for %v: %v\n%s", hold, err, out)
	}
	if took < hold/2 {
		t.Fatalf("apt-get.sh update took %v with the lists locked for %v: it did not wait\n%s", took, hold, out)
	}
	if !strings.Contains(out, "waiting up to") {
		t.Errorf("apt-get.sh did not say it waited for the lock:\n%s", out)
	}

	// Another of this project's apt runs: the wrapper's flock.
	f, err := os.OpenFile(wrapperLock, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(hold, func() { f.Close() })
	took, out, err = runWrapper(t, env, "update", "-qq")
	if err != nil || took < hold/2 {
		t.Fatalf("apt-get.sh update beside another apt-get.sh run holding %s for %v: took %v, %v\n%s", wrapperLock, hold, took, err, out)
	}

	// A failure that is not a lock's is not retried: it comes back at once.
	took, out, err = runWrapper(t, env, "install", "-y", "-qq", "jailcell-no-such-package")
	if err == nil || took > 30*time.Second || !strings.Contains(out, "jailcell-no-such-package") {
		t.Fatalf("apt-get.sh install of a missing package: %v after %v\n%s", err, took, out)
	}
}
