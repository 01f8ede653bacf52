package runner

import (
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Script is the kernel's source. The host writes it to ScriptName in the
// session's control directory, which the sandbox sees read-only.
//
//go:embed kernel.py
var Script []byte

const (
	// ScriptName is the file name the kernel script is run from.
	ScriptName = "kernel.py"
	// SocketName is the file name of the host's listening socket.
	SocketName = "host.sock"
	// DefaultMaxFrame is the frame size limit used when a caller passes a
	// limit <= 0, and the largest frame the kernel accepts. A kernel result
	// can carry up to 32 MiB of rich output plus its error, so a smaller
	// limit turns a cell with large figures into a broken connection.
	DefaultMaxFrame = 64 << 20
)

// Sentinel errors of the package; match them with errors.Is.
var (
	// ErrFrameTooLarge reports a frame longer than the limit. A Conn that
	// reads one is broken: the rest of the stream cannot be trusted.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrProtocol reports a frame that breaks the protocol: not a JSON
	// object, a hello or result of the wrong shape, an unknown status.
	ErrProtocol = errors.New("kernel protocol violation")
	// ErrNotStarted marks an Exec that failed before the cell's code ran:
	// nothing was sent, or the connection ended before the kernel's
	// "started" frame for the cell. The kernel sends that frame before any
	// of the cell's code, so without it the code did not run. (Code of an
	// earlier cell still running in the kernel could forge the frame; it
	// can only mislead its own session.)
	ErrNotStarted = errors.New("the cell did not start")
)

// Listen removes a stale SocketName in dir and listens there. dir must be a
// host-owned directory that the sandbox cannot write (it is bind-mounted
// read-only), so the remove and chmod by path cannot be redirected by a
// symlink planted from inside.
func Listen(dir string) (*net.UnixListener, error) {
	p := filepath.Join(dir, SocketName)
	fi, err := os.Lstat(p)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		// Fail closed: never delete what is not ours to clean up.
		return nil, fmt.Errorf("listen %s: exists and is not a socket (%s)", p, fi.Mode().Type())
	case err == nil:
		if err := os.Remove(p); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", p, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("stat %s: %w", p, err)
	}
	// sun_path holds 107 bytes; a deep state directory would not fit.
	// Binding through /proc/self/fd/N of the opened directory is the same
	// file at a short name.
	bindAt := p
	if len(p) > 100 {
		d, err := os.Open(dir)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", dir, err)
		}
		defer d.Close()
		bindAt = fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), SocketName)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: bindAt, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", p, err)
	}
	if bindAt != p {
		// The alias is gone once the directory is closed: do not unlink
		// through it; a stale socket is replaced by the next Listen.
		l.SetUnlinkOnClose(false)
	}
	// The sandbox's root is an unprivileged uid on the host, and connecting
	// to a Unix socket needs write permission on it.
	if err := os.Chmod(p, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod %s: %w", p, err)
	}
	return l, nil
}

// Argv returns the kernel's command line inside the sandbox. ctlDir is where
// the sandbox sees the control directory (e.g. "/run/jailcell"); preload
// lists modules to import before hello, so that the first cell using them is
// fast. Entries that are not dotted ASCII Python module names are skipped.
func Argv(ctlDir string, preload []string) []string {
	argv := []string{
		"python3", "-s",
		path.Join(ctlDir, ScriptName),
		"--connect", path.Join(ctlDir, SocketName),
	}
	var mods []string
	for _, m := range preload {
		if isModuleName(m) {
			mods = append(mods, m)
		}
	}
	if len(mods) > 0 {
		argv = append(argv, "--preload", strings.Join(mods, ","))
	}
	return argv
}

func isModuleName(s string) bool {
	if s == "" {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" {
			return false
		}
		for i, r := range part {
			switch {
			case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
			case i > 0 && '0' <= r && r <= '9':
			default:
				return false
			}
		}
	}
	return true
}
