package workflow

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
)

func TestNormalise(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"[Errno 2] No such file or directory: '/work/data-17.csv'", "[Errno <n>] No such file or directory: <path>"},
		{"index 12 is out of bounds for axis 0 with size 3", "index <n> is out of bounds for axis <n> with size <n>"},
		{"object at 0x7f3a2b1c0d90", "object at <n>"},
		{"name 'pritn' is not defined", "name 'pritn' is not defined"},
		{"cannot open /tmp/x/y.txt now", "cannot open <path> now"},
	} {
		if got := Normalise(tc.in); got != tc.want {
			t.Errorf("Normalise(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestImports(t *testing.T) {
	code := "import numpy as np, os.path\nfrom pandas.io import json\n  import sys\nx = 'import evil'\nfrom . import local\n"
	if got, want := Imports(code), []string{"numpy", "os", "pandas", "sys"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Imports = %v, want %v", got, want)
	}
}

func TestFingerprint(t *testing.T) {
	a := Fingerprint("KeyError", "'col_17'", []string{"pandas"})
	if a != Fingerprint("KeyError", "'col_18'", []string{"pandas"}) {
		t.Error("numbers not normalised")
	}
	if a == Fingerprint("KeyError", "'col_17'", nil) || a == Fingerprint("ValueError", "'col_17'", []string{"pandas"}) {
		t.Error("modules or type not part of the fingerprint")
	}
}

func TestMemoryExpiresAndPersists(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	mem, err := openMemory(dir, time.Hour, clock, discard)
	if err != nil {
		t.Fatal(err)
	}
	res := &seam.Result{Status: "error", Error: &seam.CellError{Type: "ZeroDivisionError", Message: "division by zero"}}
	sc := scopeOf(policy.Default(), "default")
	mem.record(0, sc, "1/0", "1/0", res)
	mem.record(0, sc, "1 / 0", "1/0", res) // whitespace differs: same code
	if k := mem.lookup(0, sc, "1/0", 2); k == nil || k.Count != 2 {
		t.Fatalf("lookup = %+v, want count 2", k)
	}
	if k := mem.lookup(0, sc, "1/0", 3); k != nil {
		t.Fatalf("lookup under threshold = %+v", k)
	}
	mem2, err := openMemory(dir, time.Hour, clock, discard)
	if err != nil || mem2.lookup(0, sc, "1/0", 2) == nil {
		t.Fatalf("not persisted: %v", err)
	}
	now = now.Add(2 * time.Hour)
	if k := mem2.lookup(0, sc, "1/0", 1); k != nil {
		t.Fatalf("expired entry still found: %+v", k)
	}
}

// TestMemoryKeyedPerOwnerAndPolicy: one owner's failures never skip
// another's requests, and a failure under one policy (or one effective
// version of it) never skips the same code under another.
func TestMemoryKeyedPerOwnerAndPolicy(t *testing.T) {
	mem, err := openMemory(t.TempDir(), time.Hour, time.Now, discard)
	if err != nil {
		t.Fatal(err)
	}
	res := &seam.Result{Status: "oom"}
	small := policy.Default()
	small.MemoryBytes = 128 << 20
	def, tight, other := scopeOf(policy.Default(), "default"), scopeOf(small, "default"), scopeOf(policy.Default(), "other")
	mem.record(1000, def, "x = bytearray(1 << 30)", "x = bytearray(1 << 30)", res)
	if mem.lookup(1000, def, "x = bytearray(1 << 30)", 1) == nil {
		t.Fatal("the recording owner and policy do not match")
	}
	for name, tc := range map[string]struct {
		uid int
		sc  scope
	}{"another owner": {1001, def}, "root": {0, def}, "another policy": {1000, other}, "the policy tightened": {1000, tight}} {
		if k := mem.lookup(tc.uid, tc.sc, "x = bytearray(1 << 30)", 1); k != nil {
			t.Errorf("%s matched %+v", name, k)
		}
	}
}

var discard = slog.New(slog.DiscardHandler)

// letters spells n in letters: Normalise leaves them alone.
func letters(n int) string {
	s := ""
	for {
		s = string(rune('a'+n%26)) + s
		if n /= 26; n == 0 {
			return s
		}
	}
}

// TestMemoryBoundedPerOwner: an owner failing on purpose with ever new
// code forgets its own oldest fingerprints, never another owner's, and
// the whole memory has a bound.
func TestMemoryBoundedPerOwner(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { now = now.Add(time.Millisecond); return now }
	mem, err := openMemory("", time.Hour, clock, discard)
	if err != nil {
		t.Fatal(err)
	}
	sc := scopeOf(policy.Default(), "default")
	fail := func(owner, i int) {
		code := "v_" + letters(i)
		mem.record(owner, sc, code, code, &seam.Result{Status: "error", Error: &seam.CellError{Type: "NameError", Message: "name '" + code + "' is not defined"}})
	}
	fail(2, 0)
	for i := range 10000 {
		fail(1, i)
	}
	if k := mem.lookup(2, sc, "v_a", 1); k == nil {
		t.Fatal("owner 2's failure was pushed out by owner 1's")
	}
	if n := len(mem.listOf(1)); n != maxFailuresPerOwner {
		t.Fatalf("owner 1 has %d fingerprints, want %d", n, maxFailuresPerOwner)
	}
	if mem.lookup(1, sc, "v_"+letters(9999), 1) == nil || mem.lookup(1, sc, "v_"+letters(0), 1) != nil {
		t.Error("owner 1 kept its oldest rather than its newest")
	}
	// Past the total, the least recently seen go, whoever's.
	mem.total = 500
	fail(3, 0)
	if n := len(mem.m); n != 500 || mem.lookup(3, sc, "v_a", 1) == nil || mem.lookup(2, sc, "v_a", 1) != nil {
		t.Errorf("%d fingerprints after the total was lowered to 500; want 500, the newest kept", n)
	}
}

// TestMemoryModulesCapped: a cell naming thousands of modules (in strings,
// too) leaves a bounded list in memory.
func TestMemoryModulesCapped(t *testing.T) {
	var code strings.Builder
	code.WriteString("import " + strings.Repeat("x", 200) + "\n")
	for i := range 5000 {
		fmt.Fprintf(&code, "s = '''\nimport m_%s\n'''\n", letters(i))
	}
	code.WriteString("1/0\n")
	mem, err := openMemory(t.TempDir(), time.Hour, time.Now, discard)
	if err != nil {
		t.Fatal(err)
	}
	sc := scopeOf(policy.Default(), "default")
	mem.record(0, sc, code.String(), code.String(), &seam.Result{Status: "error", Error: &seam.CellError{Type: "ZeroDivisionError", Message: "division by zero"}})
	list := mem.listOf(0)
	if len(list) != 1 || len(list[0].Modules) != maxModules {
		t.Fatalf("%d failures, modules %v; want one with %d modules", len(list), list[0].Modules, maxModules)
	}
	for _, m := range list[0].Modules {
		if len(m) > maxModuleName {
			t.Errorf("module name of %d bytes kept", len(m))
		}
	}
}

// TestCorruptFailuresFileDoesNotBlockStart: a failures.json that cannot be
// read back is set aside with a warning and memory starts empty; the
// daemon starts.
func TestCorruptFailuresFileDoesNotBlockStart(t *testing.T) {
	for name, plant := range map[string]func(path string) error{
		"not JSON": func(path string) error { return os.WriteFile(path, []byte(`[{"uid":`), 0o600) },
		"over the bound": func(path string) error {
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(maxFailuresFile + 1) // sparse
		},
		"a symlink": func(path string) error { return os.Symlink("/etc/hostname", path) },
		"a FIFO":    func(path string) error { return syscall.Mkfifo(path, 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FailuresFile)
			if err := plant(path); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			r, err := New(nil, Config{ReviewDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if l := r.Failures(0); len(l) != 0 {
				t.Errorf("failures %+v, want none", l)
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if len(aside) != 1 || !strings.Contains(logs.String(), "set aside") || !strings.Contains(logs.String(), aside[0]) {
				t.Fatalf("set aside %v; log:\n%s", aside, logs.String())
			}
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still in place: %v", path, err)
			}
		})
	}
}

func TestCodeBlock(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"```python\nprint(1)\n```", "print(1)"},
		{"Sure:\n```\nx = 1\ny = 2\n```\nbye", "x = 1\ny = 2"},
		{"```text\nnote\n```\n```py\nprint(2)\n```", "print(2)"},
		{"```bash\nls\n```", "ls"},
		{"print(3)", "print(3)"},
		{"", ""},
	} {
		if got := CodeBlock(tc.in); got != tc.want {
			t.Errorf("CodeBlock(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzCodeBlock(f *testing.F) {
	for _, s := range []string{"```python\nprint(1)\n```", "```\n```", "``````", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got := CodeBlock(s); len(got) > len(s) {
			t.Fatalf("CodeBlock grew its input: %q -> %q", s, got)
		}
	})
}

// TestMemorySaveErrorIsLogged: a failure memory that cannot be saved loses
// memory, never the request, and says so.
func TestMemorySaveErrorIsLogged(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	mem, err := openMemory(dir, time.Hour, time.Now, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// A non-empty directory in its place: the rename over it fails.
	if err := os.MkdirAll(filepath.Join(dir, FailuresFile, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	res := &seam.Result{Status: "error", Error: &seam.CellError{Type: "ZeroDivisionError", Message: "division by zero"}}
	if fp := mem.record(0, scopeOf(policy.Default(), "default"), "1/0", "1/0", res); fp == "" {
		t.Fatal("no fingerprint")
	}
	if !strings.Contains(logs.String(), "save failure memory") || !strings.Contains(logs.String(), FailuresFile) {
		t.Errorf("the failed save is not logged:\n%s", logs.String())
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, FailuresFile+".tmp-*")); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}
