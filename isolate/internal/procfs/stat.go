package procfs

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Stat is what /proc/PID/stat says of a process that jailcell uses.
type Stat struct {
	Comm, State string
	PPid        int
	Threads     int
}

// ReadStat reads /proc/PID/stat: the command (between the first "("
// and the last ")", as it may hold either), then the fields after it.
func ReadStat(pid int) (Stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	s := string(b)
	lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if lp < 0 || rp < lp || rp+2 > len(s) {
		return Stat{}, false
	}
	f := strings.Fields(s[rp+2:])
	if len(f) < 18 {
		return Stat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	threads, _ := strconv.Atoi(f[17]) // field 20, num_threads
	return Stat{Comm: s[lp+1 : rp], State: f[0], PPid: ppid, Threads: threads}, true
}

// Table reads every process's name, state and parent.
func Table() map[int]Stat {
	out := map[int]Stat{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := ReadStat(pid); ok {
			out[pid] = st
		}
	}
	return out
}

// ChildrenListed reports whether the kernel lists each thread's children
// in /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN); probed once.
var ChildrenListed = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/thread-self/children")
	return err == nil
})

// Descendants lists pid's descendants (not pid) from each thread's
// /proc/PID/task/TID/children: a walk of the tree itself, whose cost is
// the tree's, where a scan of every /proc/PID/stat costs every process on
// the host (thousands beside a thousand sessions). ok is false when the
// kernel lists no children (ChildrenListed) or pid is gone: the caller
// scans (Table). A child is listed by the thread that made it, and when
// that thread ends, by the thread it is handed to, so every thread is
// read. A process that ends during the walk is skipped.
func Descendants(pid int) (out []int, ok bool) {
	if !ChildrenListed() {
		return nil, false
	}
	seen := map[int]bool{pid: true}
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		dir := "/proc/" + strconv.Itoa(p) + "/task/"
		tids, err := os.ReadDir(dir)
		if err != nil {
			if p == pid {
				return nil, false
			}
			continue
		}
		for _, t := range tids {
			b, err := os.ReadFile(dir + t.Name() + "/children")
			if err != nil {
				continue // the thread ended since the list was read
			}
			for _, f := range strings.Fields(string(b)) {
				if k, err := strconv.Atoi(f); err == nil && !seen[k] {
					seen[k] = true
					out = append(out, k)
					todo = append(todo, k)
				}
			}
		}
	}
	return out, true
}

// Alive says whether pid runs (not a zombie).
func Alive(pid int) bool {
	st, ok := ReadStat(pid)
	return ok && st.State != "Z"
}

// Exited reports whether the process pid has ended: gone, or a zombie
// with no thread left. A zombie leader whose other threads live is not
// ended: that is a process in execve from another thread.
func Exited(pid int) bool {
	st, ok := ReadStat(pid)
	return !ok || ((st.State == "Z" || st.State == "X") && st.Threads <= 1)
}

// LeftBehind waits up to within for every process named comm that is a
// child of ppid, and every child of one, to be gone, and returns the
// names of those still there: what a bounded helper (a criu killed at its
// deadline, the script it ran) must not leave behind.
func LeftBehind(ppid int, comm string, within time.Duration) []string {
	deadline := time.Now().Add(within)
	for {
		var left []string
		table := Table()
		for _, st := range table {
			if st.State == "Z" {
				continue
			}
			if st.PPid == ppid && st.Comm == comm || table[st.PPid].PPid == ppid && table[st.PPid].Comm == comm {
				left = append(left, st.Comm)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}
