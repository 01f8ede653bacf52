package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestServeTermOnceListening: a SIGTERM sent the moment serve's socket
// exists (a systemd stop right after start, a test's cleanup) drains and
// exits 0. Serve used to register its signals only after it had started
// serving, and a SIGTERM in between ended it by the default action, its
// sandboxes and state left as they were (CI, stop 23).
func TestServeTermOnceListening(t *testing.T) {
	testenv.RequiresRoot(t)
	for round := range 3 {
		cmd, dir := serveCmd(t, "pool:\n  size: 0\n")
		log := &testenv.LockedBuffer{}
		cmd.Stderr = log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// No sleep between looks: the signal goes as close to the
		// socket's creation as this test can see it.
		sock := filepath.Join(dir, "run", "j.sock")
		for deadline := time.Now().Add(60 * time.Second); ; {
			if _, err := os.Lstat(sock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("round %d: serve made no socket within 60 s:\n%s", round, log.String())
			}
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("round %d: serve sent SIGTERM as its socket appeared exited with %v, want 0 after a drain:\n%s", round, err, log.String())
			}
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("round %d: serve did not stop within 2 min of SIGTERM:\n%s", round, log.String())
		}
	}
}
