package runner

import (
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// kernelFiles is the kernel, a Python package of one module per concern.
// The host writes it into the session's control directory (WriteKernel),
// which the sandbox sees read-only, and starts it with Argv.
//
// A pattern, not the directory: embedding a directory leaves out files whose
// names start with "_", such as __init__.py.
//
//go:embed jailcell_kernel/*.py
var kernelFiles embed.FS

const (
	// PackageName is the kernel package's directory in the control
	// directory, and its import name: the one name the kernel adds to
	// what a cell can import, chosen not to shadow a user's module.
	PackageName = "jailcell_kernel"
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

// WriteKernel writes the kernel package into ctlDir, as
// ctlDir/PackageName/*.py (directory 0755, files 0644). ctlDir must be a
// host-owned directory the sandbox cannot write, so writing by path there
// cannot be redirected by a symlink planted from inside.
func WriteKernel(ctlDir string) error {
	dir := filepath.Join(ctlDir, PackageName)
	if err := os.Mkdir(dir, 0o755); err != nil {
		// A directory left by an earlier write is rewritten; anything else
		// there (a symlink, a file) is not ours to write through.
		fi, lerr := os.Lstat(dir)
		if !errors.Is(err, fs.ErrExist) || lerr != nil || !fi.IsDir() {
			return fmt.Errorf("write kernel: %w", err)
		}
	}
	ents, err := kernelFiles.ReadDir(PackageName)
	if err != nil {
		return fmt.Errorf("write kernel: %w", err)
	}
	for _, e := range ents {
		b, err := kernelFiles.ReadFile(path.Join(PackageName, e.Name()))
		if err != nil {
			return fmt.Errorf("write kernel: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			return fmt.Errorf("write kernel: %w", err)
		}
	}
	return nil
}

// KernelDigest is a SHA-256 of the whole kernel package (every file's name
// and content, in name order): it changes when any kernel file does, so a
// checkpoint of an older kernel (session/template.go) is never restored.
var KernelDigest = sync.OnceValue(func() []byte {
	h := sha256.New()
	ents, err := kernelFiles.ReadDir(PackageName)
	if err != nil {
		panic(fmt.Sprintf("read the embedded kernel: %v", err)) // cannot happen: go:embed checked it at build
	}
	for _, e := range ents { // ReadDir sorts by name
		b, err := kernelFiles.ReadFile(path.Join(PackageName, e.Name()))
		if err != nil {
			panic(fmt.Sprintf("read the embedded kernel: %v", err))
		}
		// Lengths first, so that no two packages hash the same bytes.
		var n [16]byte
		binary.BigEndian.PutUint64(n[:8], uint64(len(e.Name())))
		binary.BigEndian.PutUint64(n[8:], uint64(len(b)))
		h.Write(n[:])
		h.Write([]byte(e.Name()))
		h.Write(b)
	}
	return h.Sum(nil)
})

// kernelBoot is the program python3 -c runs: put the control directory
// (argv[1]) first on sys.path, where a script run would have put the
// script's directory, import the kernel from it and run it with the rest
// of argv. The kernel's main puts "" back there for the cells, so the
// control directory is never on a cell's sys.path: a cell sees only the
// already imported jailcell_kernel.
//
// Why -s -c and not the alternatives:
//   - -m would put the working directory (the user's, writable) first on
//     sys.path while the kernel imports itself and the stdlib, so a cell's
//     file named json.py, or a directory named jailcell_kernel, could
//     replace kernel code at the next start; -c puts "" there, which this
//     program replaces before its first import;
//   - -I would also ignore the PYTHON* variables of the session's
//     environment (PYTHONHASHSEED, PYTHONWARNINGS...), which the cells got
//     when the kernel ran as a script with -s; -s alone keeps that.
const kernelBoot = "import sys; sys.path[0] = sys.argv[1]; from " + PackageName + ".start import main; main(sys.argv[2:])"

// Command is the part of the kernel's command line (Argv) that does not
// depend on the session: the interpreter, its options and the boot
// program with its directory. A zygote (isolate.Zygote) runs what follows
// it in its forks.
func Command(ctlDir string) []string {
	return []string{"python3", "-s", "-c", kernelBoot, path.Clean(ctlDir)}
}

// Modules lists the kernel package's modules as Python imports them, for a
// zygote to import before it forks.
func Modules() []string {
	ents, _ := kernelFiles.ReadDir(PackageName)
	var mods []string
	for _, e := range ents {
		name := strings.TrimSuffix(e.Name(), ".py")
		if name == "__init__" {
			continue
		}
		mods = append(mods, PackageName+"."+name)
	}
	return mods
}

// Argv returns the kernel's command line inside the sandbox. ctlDir is where
// the sandbox sees the control directory (e.g. "/run/jailcell"); preload
// lists modules to import before hello, so that the first cell using them is
// fast. Entries that are not dotted ASCII Python module names are skipped.
func Argv(ctlDir string, preload []string) []string {
	argv := append(Command(ctlDir), "--connect", path.Join(ctlDir, SocketName))
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
