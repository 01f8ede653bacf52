package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// EndStrayCriu finds the criu processes this test process started that
// still run (libcontainer's criu swrk of a checkpoint or restore, and
// their descendants), kills them by pid and returns one line for each:
// pid, command line and the kernel function it waits in. TestMain calls it
// after the tests: every criu operation is bounded and waited for, so one
// still running means an operation outlived its test, and once this
// process exits it would be left to PID 1 for `make test`'s leak check to
// find with nothing to say whose it was.
func EndStrayCriu() []string {
	self := os.Getpid()
	table := procTable()
	roots := map[int]bool{}
	for pid, st := range table {
		if st.ppid == self && st.comm == "criu" && st.state != "Z" {
			roots[pid] = true
		}
	}
	if len(roots) == 0 {
		return nil
	}
	// The roots and all their descendants, stopped first so none forks
	// away while the tree is read.
	tree := map[int]bool{}
	for pid := range roots {
		tree[pid] = true
		_ = unix.Kill(pid, unix.SIGSTOP)
	}
	for changed := true; changed; {
		changed = false
		for pid, st := range procTable() {
			if tree[st.ppid] && !tree[pid] {
				tree[pid], changed = true, true
				_ = unix.Kill(pid, unix.SIGSTOP)
			}
		}
	}
	var out []string
	for pid := range tree {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		out = append(out, fmt.Sprintf("pid %d (parent %d): %q waiting in %s", pid, table[pid].ppid,
			strings.TrimRight(strings.ReplaceAll(string(cmd), "\x00", " "), " "), wchan))
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	// Reap the direct children, so none is left a zombie either.
	deadline := time.Now().Add(5 * time.Second)
	for pid := range roots {
		for time.Now().Before(deadline) {
			var ws unix.WaitStatus
			if n, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); n == pid || err != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return out
}

type procStat struct {
	comm, state string
	ppid        int
}

func procTable() map[int]procStat {
	out := map[int]procStat{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if lp < 0 || rp < lp {
			continue
		}
		f := strings.Fields(s[rp+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out[pid] = procStat{comm: s[lp+1 : rp], state: f[0], ppid: ppid}
	}
	return out
}
