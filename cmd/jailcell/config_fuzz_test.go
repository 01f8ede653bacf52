package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// checkConfig is the invariant of policy and config loading, for any
// bytes in the file: no panic, and a configuration that loads has only
// valid policies (a loaded limit is never outside its allowed range).
func checkConfig(t *testing.T, dir string, data string) {
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JAILCELL_CONFIG", path)
	cfg, err := loadConfig(nil)
	if err != nil {
		if !strings.Contains(err.Error(), "config") {
			t.Fatalf("error does not say where: %v", err)
		}
		return
	}
	for name, p := range cfg.Policies {
		if verr := p.Validate(); verr != nil {
			t.Fatalf("policy %s loaded but invalid: %v", name, verr)
		}
	}
}

// TestConfigSeeds runs the fuzz seeds as a unit test.
func TestConfigSeeds(t *testing.T) {
	hermeticConfig(t)
	seeds, _ := filepath.Glob("testdata/fuzz/FuzzLoadConfig/*")
	if len(seeds) < 5 {
		t.Fatalf("only %d seeds", len(seeds))
	}
	dir := t.TempDir()
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(b), "\n", 3)
		v, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
		if err != nil {
			t.Fatalf("seed %s: %v", s, err)
		}
		t.Run(filepath.Base(s), func(t *testing.T) { checkConfig(t, dir, v) })
	}
}

func FuzzLoadConfig(f *testing.F) {
	hermeticConfig(f)
	f.Add("sessions:\n  max: 8\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data string) { checkConfig(t, dir, data) })
}
