package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
)

func TestMain(m *testing.M) {
	isolate.Init()
	// A jailcell this test starts never reads the host's config or finds
	// its service (make test runs beside one).
	testenv.Hermetic()
	os.Exit(m.Run())
}

// TestEmbed runs the example end to end (privileged tier).
func TestEmbed(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), out, r.Dir, testenv.StateDir(t)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out.Name())
	if !strings.Contains(string(b), "mean 22.47") || !strings.Contains(string(b), "one-shot python 3.") {
		t.Fatalf("output:\n%s", b)
	}
}
