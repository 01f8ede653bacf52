package seccomp

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/internal/helper"
)

// Seccomp filter programs, read back. The posture check's /proc status
// fields give a thread's seccomp mode and filter count, not the program:
// a seccomp.img edited to hold one allow-all filter in place of the
// allowlist restores with "Seccomp: 2, Seccomp_filters: 1" like a cold
// start. So the programs themselves are read with
// PTRACE_SECCOMP_GET_FILTER and hashed, and compared with the programs a
// cold start loads for the same configuration.
//
// Reading needs ptrace (a seize and an interrupt of every thread), which
// the daemon cannot do itself: the tracee's ptrace stops would be reported
// to the daemon's waits on its children (the sandbox's exit watcher would
// see a stop as its init's status), and PTRACE_SECCOMP_GET_FILTER must
// come from the thread that seized. So a short-lived helper does it: this
// binary re-executed through /proc/self/exe with a hidden first argument,
// the way libcontainer re-executes it as "init" (isolate.Init dispatches both).
// The helper is bounded in time (killed past helperTimeout) and in what
// the daemon reads of its output.

const (
	// ReadArg makes the binary the filter reader: its further
	// arguments are thread ids; for each it prints one line, "TID N SHA256"
	// (N filters, the sha256 of their programs), "TID gone" or
	// "TID error MESSAGE". Not a word a subcommand could be.
	ReadArg = "__jailcell-internal-seccomp-read"
	// LoadArg makes the binary the reference loader: it reads a
	// libcontainer seccomp configuration (JSON) from stdin, loads it as
	// libcontainer's init does, prints its thread id and waits for stdin
	// to close.
	LoadArg = "__jailcell-internal-seccomp-load"

	// DumpArg makes the binary the program dumper: its one further
	// argument is a thread id with exactly one filter, whose program it
	// writes to stdout as raw struct sock_filter entries (a zygote's child
	// loads the very program a cold start has; Zygote).
	DumpArg = "__jailcell-internal-seccomp-dump"

	// helperTimeout bounds one helper run (a reader of a few hundred
	// threads takes milliseconds).
	helperTimeout = 10 * time.Second
	// maxFilters bounds the filters read per thread: the kernel caps a
	// thread's chain at 32768 instructions with 4 counted per filter, so
	// no real chain is near it; more is refused.
	maxFilters = 64
	// bpfMaxInsns is the kernel's BPF_MAXINSNS: no filter is longer.
	bpfMaxInsns = 4096
	// seccompConfigMax bounds the configuration the loader reads.
	seccompConfigMax = 4 << 20
)

// FilterSum is one thread's filter chain as the reader reports it.
type FilterSum struct {
	N   int
	Sum string // hex sha256 of the programs, newest first
}

func (f FilterSum) String() string {
	s := f.Sum
	if len(s) > 16 {
		s = s[:16]
	}
	return fmt.Sprintf("%d filter(s) sha256 %s", f.N, s)
}

// ReadFiltersMain is the reader helper.
func ReadFiltersMain(args []string) int {
	// PTRACE_SEIZE binds the tracee to this thread; every later request
	// must come from it.
	runtime.LockOSThread()
	out := bufio.NewWriter(os.Stdout)
	if len(args) == 1 && args[0] == "-" {
		// Serving: one request per line of thread ids (filterReader).
		return helper.ServeLines(os.Stdin, out, func(tids []string, w io.Writer) int { return readFilterLines(w, tids) })
	}
	if rc := readFilterLines(out, args); rc != 0 {
		return rc
	}
	if err := out.Flush(); err != nil {
		return 1
	}
	return 0
}

func readFilterLines(out io.Writer, args []string) int {
	for _, a := range args {
		tid, err := strconv.Atoi(a)
		if err != nil || tid <= 0 {
			fmt.Fprintf(os.Stderr, "thread id %q: want a positive integer\n", a)
			return 2
		}
		f, err := threadFilters(tid)
		switch {
		case errors.Is(err, unix.ESRCH):
			fmt.Fprintf(out, "%d gone\n", tid)
		case err != nil:
			fmt.Fprintf(out, "%d error %s\n", tid, strings.ReplaceAll(err.Error(), "\n", " "))
		default:
			fmt.Fprintf(out, "%d %d %s\n", tid, f.N, f.Sum)
		}
	}
	return 0
}

// filterReader is the reader helper kept running: a posture check (every
// restore and zygote fork) then costs the ptrace reads, not a process
// start of this binary (about 15 ms of a fork's 60).
var filterReader = &helper.LineHelper{Name: "seccomp filter reader", Args: []string{ReadArg, "-"}, Restart: true}

// FilterReaderPid is the running reader's pid, 0 if none.
func FilterReaderPid() int { return filterReader.Pid() }

func ptrace(req, tid int, addr, data uintptr) (uintptr, error) {
	r, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
	if e != 0 {
		return 0, e
	}
	return r, nil
}

// threadFilters seizes thread tid, stops it, hashes its filter programs
// and lets it go. ESRCH: the thread ended.
func threadFilters(tid int) (FilterSum, error) {
	f, _, err := threadPrograms(tid, false)
	return f, err
}

// threadPrograms is threadFilters that also returns the programs, newest
// first, when keep is set.
func threadPrograms(tid int, keep bool) (FilterSum, [][]unix.SockFilter, error) {
	var progs [][]unix.SockFilter
	if _, err := ptrace(unix.PTRACE_SEIZE, tid, 0, 0); err != nil {
		return FilterSum{}, nil, fmt.Errorf("seize: %w", err)
	}
	sig := 0 // a signal whose delivery stop we took is given back
	defer func() { _, _ = ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(sig)) }()
	if _, err := ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0); err != nil {
		return FilterSum{}, nil, fmt.Errorf("interrupt: %w", err)
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(tid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return FilterSum{}, nil, fmt.Errorf("wait: %w", err)
		}
		break
	}
	if ws.Exited() || ws.Signaled() {
		return FilterSum{}, nil, unix.ESRCH
	}
	if !ws.Stopped() {
		return FilterSum{}, nil, fmt.Errorf("wait: status %#x is no stop", uint32(ws))
	}
	if uint32(ws)>>16 == 0 {
		// No ptrace event: a signal-delivery stop, taken before the
		// interrupt's. The signal is delivered on detach.
		sig = int(ws.StopSignal())
	}
	h := sha256.New()
	n := 0
	for ; ; n++ {
		cnt, err := ptrace(unix.PTRACE_SECCOMP_GET_FILTER, tid, uintptr(n), 0)
		if err == unix.ENOENT || (n == 0 && err == unix.EINVAL) {
			break // past the oldest filter; EINVAL: no filter mode at all
		}
		if err != nil {
			return FilterSum{}, nil, fmt.Errorf("get filter %d: %w", n, err)
		}
		if n >= maxFilters {
			return FilterSum{}, nil, fmt.Errorf("more than %d filters", maxFilters)
		}
		if cnt == 0 || cnt > bpfMaxInsns {
			return FilterSum{}, nil, fmt.Errorf("filter %d: %d instructions", n, cnt)
		}
		prog := make([]unix.SockFilter, cnt)
		got, err := ptrace(unix.PTRACE_SECCOMP_GET_FILTER, tid, uintptr(n), uintptr(unsafe.Pointer(&prog[0])))
		if err != nil {
			return FilterSum{}, nil, fmt.Errorf("get filter %d: %w", n, err)
		}
		if got != cnt {
			return FilterSum{}, nil, fmt.Errorf("filter %d: %d instructions, then %d", n, cnt, got)
		}
		HashProgram(h, prog)
		if keep {
			progs = append(progs, prog)
		}
	}
	return FilterSum{N: n, Sum: hex.EncodeToString(h.Sum(nil))}, progs, nil
}

// HashProgram adds one filter, length first so that two chains hash alike
// only if their programs are the same.
func HashProgram(h io.Writer, prog []unix.SockFilter) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(len(prog)))
	h.Write(b[:])
	for _, in := range prog {
		binary.LittleEndian.PutUint16(b[0:], in.Code)
		b[2], b[3] = in.Jt, in.Jf
		binary.LittleEndian.PutUint32(b[4:], in.K)
		h.Write(b[:])
	}
}

// LoadFilterMain is the reference loader: the seccomp configuration
// libcontainer's init would be sent, loaded the way that init loads it
// (no_new_privs, then seccomp.InitSeccomp on this thread), then held for
// the reader until stdin closes.
func LoadFilterMain() int {
	runtime.LockOSThread()
	var cfg configs.Seccomp
	if err := json.NewDecoder(io.LimitReader(os.Stdin, seccompConfigMax)).Decode(&cfg); err != nil {
		fmt.Fprintf(os.Stderr, "read seccomp configuration: %v\n", err)
		return 2
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "set no_new_privs: %v\n", err)
		return 1
	}
	if _, err := seccomp.InitSeccomp(&cfg); err != nil {
		fmt.Fprintf(os.Stderr, "load seccomp filter: %v\n", err)
		return 1
	}
	fmt.Printf("%d\n", unix.Gettid())
	var b [64]byte
	for {
		n, err := unix.Read(0, b[:])
		if err == unix.EINTR {
			continue
		}
		if n <= 0 {
			return 0
		}
	}
}

// helperCmd is this binary as helper arg, with an empty environment.
func helperCmd(ctx context.Context, arg string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, "/proc/self/exe", append([]string{arg}, args...)...)
	c.Args[0] = "jailcell-seccomp-helper"
	c.Env = []string{}
	c.WaitDelay = time.Second
	return c
}

// ReadFilters runs the reader on tids and returns each live thread's
// filter chain (a thread that ended is absent) and a per-thread error for
// those it could not read.
func ReadFilters(tids []int) (map[int]FilterSum, map[int]string, error) {
	sums, errs := map[int]FilterSum{}, map[int]string{}
	if len(tids) == 0 {
		return sums, errs, nil
	}
	args := make([]string, len(tids))
	for i, t := range tids {
		args[i] = strconv.Itoa(t)
	}
	lines, err := filterReader.Ask(strings.Join(args, " "), len(args), helperTimeout)
	if err != nil {
		return nil, nil, err
	}
	want := map[int]bool{}
	for _, t := range tids {
		want[t] = true
	}
	for _, line := range lines {
		f := strings.SplitN(line, " ", 3)
		tid, err := strconv.Atoi(f[0])
		if err != nil || !want[tid] || len(f) < 2 || len(line) > helper.LineMax {
			return nil, nil, fmt.Errorf("seccomp filter reader line %q", line)
		}
		delete(want, tid)
		switch {
		case f[1] == "gone" && len(f) == 2:
		case f[1] == "error" && len(f) == 3:
			errs[tid] = f[2]
		default:
			n, err := strconv.Atoi(f[1])
			if err != nil || len(f) != 3 || len(f[2]) != 2*sha256.Size {
				return nil, nil, fmt.Errorf("seccomp filter reader line %q", line)
			}
			sums[tid] = FilterSum{N: n, Sum: f[2]}
		}
	}
	if len(want) > 0 {
		return nil, nil, fmt.Errorf("seccomp filter reader left out %d thread(s)", len(want))
	}
	return sums, errs, nil
}

// withReference loads cfg into a fresh helper process exactly as
// libcontainer's init does and calls fn with the thread that holds it.
func withReference(cfg *configs.Seccomp, fn func(tid int) error) error {
	conf, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode seccomp configuration: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
	defer cancel()
	c := helperCmd(ctx, LoadArg)
	stdin, err := c.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		return err
	}
	stderr := &helper.BoundedBuffer{Max: 4096}
	c.Stderr = stderr
	if err := c.Start(); err != nil {
		return fmt.Errorf("start the seccomp filter loader: %w", err)
	}
	defer func() {
		stdin.Close()
		_ = c.Wait()
	}()
	if _, err := stdin.Write(conf); err != nil {
		return fmt.Errorf("send the seccomp filter loader its configuration: %w", err)
	}
	line, err := bufio.NewReaderSize(io.LimitReader(stdout, 32), 32).ReadString('\n')
	tid, aerr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || aerr != nil {
		return fmt.Errorf("seccomp filter loader said %q: %v %s", line, err, strings.TrimSpace(stderr.String()))
	}
	return fn(tid)
}

// ColdFilters is the filter chain a cold start of cfg has.
func ColdFilters(cfg *configs.Seccomp) (FilterSum, error) {
	var f FilterSum
	err := withReference(cfg, func(tid int) error {
		sums, errs, err := ReadFilters([]int{tid})
		if err != nil {
			return err
		}
		var ok bool
		if f, ok = sums[tid]; !ok {
			return fmt.Errorf("read the reference seccomp filter: %s", errs[tid])
		}
		return nil
	})
	return f, err
}

// ColdProgram is the one filter program a cold start of cfg loads, as raw
// struct sock_filter entries.
func ColdProgram(cfg *configs.Seccomp) ([]byte, error) {
	var prog []byte
	err := withReference(cfg, func(tid int) error {
		ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
		defer cancel()
		c := helperCmd(ctx, DumpArg, strconv.Itoa(tid))
		out := &helper.BoundedBuffer{Max: bpfMaxInsns * 8}
		stderr := &helper.BoundedBuffer{Max: 4096}
		c.Stdout, c.Stderr = out, stderr
		if err := c.Run(); err != nil {
			return fmt.Errorf("run the seccomp program dumper: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		if out.Over || out.Len() == 0 || out.Len()%8 != 0 {
			return fmt.Errorf("seccomp program dumper wrote %d bytes", out.Len())
		}
		prog = out.Bytes()
		return nil
	})
	return prog, err
}

// DumpFilterMain is the program dumper.
func DumpFilterMain(args []string) int {
	runtime.LockOSThread()
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "want one thread id")
		return 2
	}
	tid, err := strconv.Atoi(args[0])
	if err != nil || tid <= 0 {
		fmt.Fprintf(os.Stderr, "thread id %q: want a positive integer\n", args[0])
		return 2
	}
	f, progs, err := threadPrograms(tid, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if f.N != 1 {
		fmt.Fprintf(os.Stderr, "thread %d has %d filters, want 1\n", tid, f.N)
		return 1
	}
	b := make([]byte, 0, 8*len(progs[0]))
	for _, in := range progs[0] {
		b = binary.LittleEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	if _, err := os.Stdout.Write(b); err != nil {
		return 1
	}
	return 0
}
