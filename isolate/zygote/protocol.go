package zygote

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Script is the zygote's program, run by the rootfs's Python.
//
//go:embed zygote.py
var Script []byte

// ScriptName is its name in the zygote's directory. Not one a
// Prepare would write: a name no Python package takes.
const ScriptName = "jailcell-zygote.py"

// Interpreter is the interpreter and its options at the head of cmd:
// everything before the first argument that is not an option, or before
// -c (which takes the program as its own).
func Interpreter(cmd []string) []string {
	for i, a := range cmd {
		if i == 0 {
			continue
		}
		if a == "-c" || !strings.HasPrefix(a, "-") {
			return cmd[:i]
		}
	}
	return cmd
}

// Recv reads one message (at most 64 KiB) from f, waiting at most
// timeout. The zygote and its forks send no descriptors: any that come are
// closed and the message refused.
func Recv(f *os.File, timeout time.Duration) ([]byte, error) {
	fd := int(f.Fd())
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("no answer in %s", timeout)
		}
		n, err := unix.Poll(pfd, int(left/time.Millisecond)+1)
		if err == unix.EINTR || (err == nil && n == 0) {
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
	if err != nil {
		return nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, m := range msgs {
				if got, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(fds) > 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("message too long, or with descriptors")
	}
	if n == 0 {
		return nil, errors.New("connection closed")
	}
	return buf[:n], nil
}

// Truncate is b cut to n bytes for an error message, marked if cut.
func Truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
