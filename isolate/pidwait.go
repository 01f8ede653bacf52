package isolate

import (
	"os"

	"golang.org/x/sys/unix"
)

// awaitExit returns once the process behind pidfd has ended, parked on
// Go's network poller instead of a thread: a waitid or poll that blocks
// holds an OS thread for the sandbox's whole life, a thousand threads
// for a thousand idle sessions (about 40 KiB of the daemon's memory
// each). It takes pidfd over and closes it. false: the poller would not
// take it, and nothing was waited for.
func awaitExit(pidfd int) bool {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return false
	}
	// Registered with the poller because it is non-blocking.
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ended := false
	err = rc.Read(func(fd uintptr) bool {
		// A pidfd is readable once its process has exited.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, perr := unix.Poll(fds, 0)
		ended = perr == nil && n > 0
		return ended || perr != nil && perr != unix.EINTR
	})
	return err == nil && ended
}

// awaitPid is awaitExit on a pidfd of pid, which must be a child of this
// process not yet reaped (so the pid cannot have been reused).
func awaitPid(pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	return awaitExit(fd)
}
