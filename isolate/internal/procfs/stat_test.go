package procfs

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestDescendantsMatchesTheScan: the walk over each thread's children
// files finds what the scan of every process's parent finds: children
// started from many threads (Go starts each from whichever thread runs
// the goroutine) and a grandchild.
func TestDescendantsMatchesTheScan(t *testing.T) {
	if !ChildrenListed() {
		t.Skip("host lacks /proc/PID/task/TID/children: its kernel was built without CONFIG_PROC_CHILDREN")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var cmds []*exec.Cmd
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // a thread of its own: the child is that thread's
			defer runtime.UnlockOSThread()
			c := exec.Command("/bin/sh", "-c", "sleep 30 & wait")
			if err := c.Start(); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			cmds = append(cmds, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	me := os.Getpid()
	var got, want []int
	for try := 0; ; try++ {
		var ok bool
		got, ok = Descendants(me)
		if !ok {
			t.Fatal("Descendants: not supported, though the children file is there")
		}
		want = scanDescendants(me)
		slices.Sort(got)
		slices.Sort(want)
		// Each shell's sleep is a grandchild: wait until all 16 are up.
		if len(want) >= 16 && slices.Equal(got, want) {
			break
		}
		if try == 100 {
			t.Fatalf("Descendants = %v, the scan finds %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := Descendants(1 << 30); ok {
		t.Error("Descendants of a pid that does not exist: ok")
	}
}

func scanDescendants(pid int) []int {
	kids := map[int][]int{}
	for p, st := range Table() {
		kids[st.PPid] = append(kids[st.PPid], p)
	}
	var out []int
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		out = append(out, kids[p]...)
		todo = append(todo, kids[p]...)
	}
	return out
}
