package workflow

import (
	"reflect"
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
	mem, err := openMemory(dir, time.Hour, clock)
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
	mem2, err := openMemory(dir, time.Hour, clock)
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
	mem, err := openMemory(t.TempDir(), time.Hour, time.Now)
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
