package helper

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// LineMax bounds each line the daemon accepts from a helper.
const LineMax = 256

// LineHelper is this binary re-executed as a helper that stays running
// and answers requests on its stdin, one line each, with lines on its
// stdout ending in a line ".": the seccomp filter reader (posture checks)
// and a zygote's id mapper. A request is bounded in time and in what is
// read back; a helper that fails one is killed and, if restart is set,
// started again by the next request. It ends when the daemon does (its
// stdin closes).
type LineHelper struct {
	Name    string   // for errors: "seccomp filter reader"
	Args    []string // after /proc/self/exe
	Restart bool

	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	err error // why it stopped, when it does not restart
}

// Start starts the helper if it is not running.
func (h *LineHelper) Start() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.start()
}

// start starts the helper if it is not running; h.mu is held.
func (h *LineHelper) start() error {
	if h.cmd != nil {
		return nil
	}
	if h.err != nil {
		return h.err
	}
	c := exec.Command("/proc/self/exe", h.Args...)
	c.Args[0] = "jailcell-helper"
	c.Env = []string{}
	in, err := c.StdinPipe()
	if err != nil {
		return err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return fmt.Errorf("start the %s: %w", h.Name, err)
	}
	h.cmd, h.in, h.out = c, in, bufio.NewReaderSize(out, LineMax+1)
	return nil
}

// stop ends the helper; h.mu is held.
func (h *LineHelper) stop(why error) {
	if h.cmd == nil {
		return
	}
	_ = h.cmd.Process.Kill()
	_ = h.in.Close()
	_ = h.cmd.Wait()
	h.cmd = nil
	if !h.Restart {
		h.err = fmt.Errorf("the %s stopped: %w", h.Name, why)
	}
}

// Ask sends request (one line) and returns the answer's lines, at most
// maxLines of at most LineMax bytes, waiting at most timeout.
func (h *LineHelper) Ask(request string, maxLines int, timeout time.Duration) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.start(); err != nil {
		return nil, err
	}
	type answer struct {
		lines []string
		err   error
	}
	ch := make(chan answer, 1)
	in, out := h.in, h.out
	go func() {
		var a answer
		if _, a.err = io.WriteString(in, request+"\n"); a.err != nil {
			ch <- a
			return
		}
		for len(a.lines) <= maxLines {
			line, err := out.ReadSlice('\n')
			if err != nil {
				a.err = fmt.Errorf("%s: %w", h.Name, err)
				break
			}
			l := strings.TrimSuffix(string(line), "\n")
			if l == "." {
				ch <- a
				return
			}
			a.lines = append(a.lines, l)
		}
		if a.err == nil {
			a.err = fmt.Errorf("%s said too much", h.Name)
		}
		ch <- a
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			h.stop(a.err)
		}
		return a.lines, a.err
	case <-time.After(timeout):
		err := fmt.Errorf("%s: no answer in %s", h.Name, timeout)
		h.stop(err)
		<-ch
		return nil, err
	}
}

// Pid is the running helper's pid, 0 if none.
func (h *LineHelper) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return 0
	}
	return h.cmd.Process.Pid
}

// Close ends the helper: its stdin closes and it exits, or is killed
// after 5 s.
func (h *LineHelper) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return
	}
	_ = h.in.Close()
	done := make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = h.cmd.Process.Kill()
		<-done
	}
	h.cmd = nil
	h.err = errors.New(h.Name + " closed")
}

// ServeLines is a helper's main loop: each line of stdin is a request
// answered by answer's lines and a line "."; it returns when stdin ends.
func ServeLines(in io.Reader, out *bufio.Writer, answer func(fields []string, out io.Writer) int) int {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rc := answer(strings.Fields(sc.Text()), out); rc != 0 {
			return rc
		}
		fmt.Fprintln(out, ".")
		if err := out.Flush(); err != nil {
			return 1
		}
	}
	return 0
}
