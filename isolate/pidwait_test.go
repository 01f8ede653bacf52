package isolate

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func threadCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// TestAwaitPidHoldsNoThread: waiting for 64 children's ends parks on the
// poller, not one thread each (a thousand idle sessions held a thousand
// threads), and each wait returns once its child has exited.
func TestAwaitPidHoldsNoThread(t *testing.T) {
	const n = 64
	before := threadCount(t)
	var cmds []*exec.Cmd
	done := make(chan int, n)
	for i := range n {
		c := exec.Command("sleep", "2")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		go func() {
			if !awaitPid(c.Process.Pid) {
				t.Errorf("child %d: awaitPid gave up", i)
			}
			done <- i
		}()
	}
	t.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	time.Sleep(500 * time.Millisecond)
	select {
	case i := <-done:
		t.Fatalf("child %d: awaitPid returned while it ran", i)
	default:
	}
	if grew := threadCount(t) - before; grew > n/4 {
		t.Errorf("%d threads more while %d waits ran, want a few at most", grew, n)
	}
	for range n {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("an awaitPid did not return 20 s after its child's end")
		}
	}
}
