package procfs

import (
	"os"
	"strconv"
	"strings"
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
