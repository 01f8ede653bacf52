package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestPythonImportCyclesFindsHiddenCycles: the check sees a cycle hidden
// in a function and under TYPE_CHECKING, and none where there is none.
func TestPythonImportCyclesFindsHiddenCycles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pkg")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"__init__.py": "",
		"a.py":        "from .b import x\n",
		"b.py":        "x = 1\ndef f():\n    from .a import y\n",
		"c.py":        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import z\n",
		"d.py":        "from . import c\n",
		"e.py":        "import os\nfrom .b import x\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := PythonImportCycles(t, dir)
	if want := []string{"a -> b -> a", "c -> d -> c"}; !slices.Equal(got, want) {
		t.Fatalf("cycles = %q, want %q", got, want)
	}
}
