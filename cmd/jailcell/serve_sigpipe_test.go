package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestServeSurvivesClosedStderr: a hand-run daemon whose stderr reader is
// gone (its terminal or parent died) still drains on SIGTERM and tears its
// sandboxes down; without SIGPIPE ignored, the first log line after the
// reader went killed it mid-drain with the sandboxes left running.
func TestServeSurvivesClosedStderr(t *testing.T) {
	testenv.RequiresRoot(t)
	cmd, dir := serveCmd(t, "pool:\n  size: 0\n")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Kill() // a no-op once it has exited
		<-exited
	}()
	sock := filepath.Join(dir, "run", "j.sock")
	if !eventually(func() bool {
		_, err := os.Stat(sock)
		return err == nil
	}) {
		t.Fatal("serve did not listen")
	}
	status, body := curl(t, sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", "{}")
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	stderr.Close() // the reader is gone: every log line from now on is EPIPE
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("serve with its stderr gone did not drain cleanly: %v", waitErr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("serve did not stop within 2 min of SIGTERM")
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "state", "sandboxes"))
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if len(left) > 0 {
		t.Fatalf("sandboxes left after the drain: %s", strings.Join(left, ", "))
	}
}
