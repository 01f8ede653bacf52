package runner

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// umask reads this process's umask from /proc (Linux 4.7+) without
// setting it, which would race with other tests creating files.
func umask(t *testing.T) fs.FileMode {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				t.Fatal(err)
			}
			return fs.FileMode(n)
		}
	}
	t.Skip("requires the Umask field of /proc/self/status (Linux 4.7+); not available here")
	return 0
}

// kernelModules lists the embedded package's files.
func kernelModules(t *testing.T) []string {
	t.Helper()
	ents, err := kernelFiles.ReadDir(PackageName)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestWriteKernel checks what the control directory gets: every file of the
// package (__init__.py too, which embedding the directory would leave out),
// byte for byte, read-only to anyone but the host; a second write over it
// works, and a symlink in the package's place is not written through.
func TestWriteKernel(t *testing.T) {
	names := kernelModules(t)
	for _, want := range []string{"__init__.py", "start.py", "state.py", "kernel.py"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Fatalf("embedded package %v lacks %s", names, want)
		}
	}
	mask := umask(t)
	ctl := t.TempDir()
	for round := 0; round < 2; round++ {
		if err := WriteKernel(ctl); err != nil {
			t.Fatalf("write %d: %v", round, err)
		}
	}
	dir := filepath.Join(ctl, PackageName)
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o755&^mask {
		t.Errorf("%s: mode %v, want a directory %v", dir, fi.Mode(), 0o755&^mask)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(names) {
		t.Errorf("wrote %d files, the package has %d (%v)", len(ents), len(names), names)
	}
	for _, name := range names {
		want, _ := kernelFiles.ReadFile(path.Join(PackageName, name))
		p := filepath.Join(dir, name)
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes (err %v), want the embedded %d", p, len(got), err, len(want))
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644&^mask {
			t.Errorf("%s: %v (err %v), want a regular file %v", p, fi.Mode(), err, 0o644&^mask)
		}
	}

	t.Run("symlink refused", func(t *testing.T) {
		ctl, elsewhere := t.TempDir(), t.TempDir()
		if err := os.Symlink(elsewhere, filepath.Join(ctl, PackageName)); err != nil {
			t.Fatal(err)
		}
		if err := WriteKernel(ctl); err == nil {
			t.Error("WriteKernel wrote through a symlink in the package's place")
		}
		if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
			t.Errorf("files written through the symlink: %v", ents)
		}
	})
}

// TestKernelDigest checks that the digest templates are keyed by covers
// every file of the package, names and contents, and nothing else: a
// deliberate copy of KernelDigest's scheme over the files WriteKernel wrote.
func TestKernelDigest(t *testing.T) {
	d := KernelDigest()
	if len(d) != sha256.Size || !bytes.Equal(d, KernelDigest()) {
		t.Fatalf("KernelDigest %x: want %d stable bytes", d, sha256.Size)
	}
	ctl := t.TempDir()
	if err := WriteKernel(ctl); err != nil {
		t.Fatal(err)
	}
	sum := func(skip string, extra []byte) []byte {
		h := sha256.New()
		for _, name := range kernelModules(t) {
			b, err := os.ReadFile(filepath.Join(ctl, PackageName, name))
			if err != nil {
				t.Fatal(err)
			}
			if name == skip {
				b = append(b, extra...)
			}
			var n [16]byte
			binary.BigEndian.PutUint64(n[:8], uint64(len(name)))
			binary.BigEndian.PutUint64(n[8:], uint64(len(b)))
			h.Write(n[:])
			h.Write([]byte(name))
			h.Write(b)
		}
		return h.Sum(nil)
	}
	if got := sum("", nil); !bytes.Equal(got, d) {
		t.Errorf("digest of the written files %x, KernelDigest %x", got, d)
	}
	for _, name := range kernelModules(t) {
		if bytes.Equal(sum(name, []byte("\n")), d) {
			t.Errorf("a change to %s leaves the digest as it was", name)
		}
	}
}

// quietImport is run by the host's python3 with the control directory and
// one module name: it imports jailcell_kernel.<module> and prints what the
// import changed in the process, which must be nothing but the new modules
// (the zygote imports the package once and forks sessions from it).
const quietImport = `
import builtins, importlib, os, random, signal, sys, threading
sys.path[0] = sys.argv[1]
SIGS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD)
def snap():
    return {
        "pid": os.getpid(),
        "threads": threading.active_count(),
        "fds": sorted(os.listdir("/proc/self/fd")),
        "stdio": (id(sys.stdin), id(sys.stdout), id(sys.stderr), id(sys.__stdout__), id(sys.__stderr__)),
        "signals": [signal.getsignal(s) for s in SIGS],
        "sigmask": signal.pthread_sigmask(signal.SIG_BLOCK, []),
        "argv": list(sys.argv),
        "path": list(sys.path),
        "meta_path": list(sys.meta_path),
        "main": id(sys.modules["__main__"]),
        "builtins": sorted(vars(builtins)),
        "input": builtins.input,
        "breakpointhook": sys.breakpointhook,
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "random": random.getstate(),
    }
before = snap()
importlib.import_module("jailcell_kernel." + sys.argv[2])
# /proc/self/fd listed itself through a fresh fd both times: same numbers.
after = snap()
bad = [k for k in before if before[k] != after[k]]
try:
    os.waitpid(-1, os.WNOHANG)
    bad.append("children")
except ChildProcessError:
    pass
print(" ".join(bad) or "quiet")
`

// TestKernelImportIsQuiet imports each module of the package alone into a
// fresh interpreter: any order must work (no import cycle at module level),
// and importing must only define things: no fork, thread, fd, signal
// handler, stdio, sys.path, builtins or seed change. main does all that.
func TestKernelImportIsQuiet(t *testing.T) {
	py := requirePython(t)
	ctl := t.TempDir()
	if err := WriteKernel(ctl); err != nil {
		t.Fatal(err)
	}
	for _, name := range kernelModules(t) {
		mod := strings.TrimSuffix(name, ".py")
		if mod == "__init__" {
			continue // imported with every module
		}
		t.Run(mod, func(t *testing.T) {
			cmd := exec.Command(py, "-s", "-B", "-c", quietImport, ctl, mod)
			cmd.Dir = t.TempDir()
			cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "quiet" {
				t.Errorf("import jailcell_kernel.%s changed: %s (err %v)", mod, out, err)
			}
		})
	}
}

// TestKernelUserModuleNames: a cell's own modules named like the kernel's
// (state, kernel, frames, files...) are the ones it imports, and the
// control directory is on no sys.path entry a cell sees; the kernel is
// reachable only under its one package name.
func TestKernelUserModuleNames(t *testing.T) {
	k := startKernel(t)
	var code strings.Builder
	mods := []string{"state", "kernel", "frames", "start", "display", "files", "charts"}
	for _, m := range mods {
		fmt.Fprintf(&code, "open(%q, 'w').write('WHO = \"user\"\\n')\n", m+".py")
	}
	code.WriteString("import sys, importlib\nimportlib.invalidate_caches()\n")
	fmt.Fprintf(&code, "[importlib.import_module(m).WHO for m in %s], sys.path[0], [p for p in sys.path if %q in p or %q in p], 'jailcell_kernel' in sys.modules\n",
		pyList(mods), k.dir, PackageName)
	r := k.exec(code.String())
	requireOK(t, r)
	want := fmt.Sprintf("(%s, '', [], True)", pyList(strings.Split(strings.Repeat("user ", len(mods)-1)+"user", " ")))
	if got := plain(r); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func pyList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = "'" + s + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestKernelPackageHasNoImportCycle: the kernel's modules import one way;
// one that needs a module above it reaches it through state (as display and
// jupyter reach the shell), never by an import hidden in a function.
func TestKernelPackageHasNoImportCycle(t *testing.T) {
	if c := testenv.PythonImportCycles(t, "jailcell_kernel"); len(c) > 0 {
		t.Fatalf("import cycles in the kernel package:\n%s", strings.Join(c, "\n"))
	}
}
