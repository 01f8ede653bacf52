package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// HangingCriu writes a criu wrapper named "criu" that runs real, except in
// the modes (criu's first argument: check, dump, restore, swrk) hang names
// at any time later, where it hangs the way criu dumps hung on a host
// before runtime/criu-patches/0002 (its sleeps are its descendants). It
// puts the wrapper's directory first in PATH for the test (libcontainer
// runs criu from PATH) and returns the wrapper's path.
func HangingCriu(t testing.TB, real string) (criu string, hang func(modes ...string)) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	modes := filepath.Join(dir, "hang")
	script := "#!/bin/sh\nif grep -qx -- \"$1\" " + modes + " 2>/dev/null; then\n\twhile :; do sleep 1; done\nfi\nexec " + real + " \"$@\"\n"
	criu = filepath.Join(dir, "criu")
	if err := os.WriteFile(criu, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	return criu, func(m ...string) {
		if err := os.WriteFile(modes, []byte(strings.Join(m, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
