package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFileSum: a checksum set on a file reads back; a file without one
// reads as ""; a recorded value that is not a sha256 is ErrCorrupt, and
// SetFileSum refuses to record one.
func TestFileSum(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if sum, err := FileSum(f); sum != "" || err != nil {
		t.Fatalf("no checksum: %q %v", sum, err)
	}
	want := strings.Repeat("ab", 32)
	if err := SetFileSum(f, want); err != nil {
		t.Fatal(err)
	}
	if sum, err := FileSum(f); sum != want || err != nil {
		t.Fatalf("FileSum: %q %v, want %q", sum, err, want)
	}
	if err := SetFileSum(f, "abc"); err == nil || !strings.Contains(err.Error(), "64 hex digits") {
		t.Fatalf("SetFileSum of a short sum: %v", err)
	}
	for _, bad := range []string{"x", strings.Repeat("zz", 32), strings.Repeat("a", 200)} {
		if err := unix.Fsetxattr(int(f.Fd()), sumXattr, []byte(bad), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := FileSum(f); !errors.Is(err, ErrCorrupt) {
			t.Errorf("FileSum of %.10q...: %v, want ErrCorrupt", bad, err)
		}
	}
	if !strings.HasPrefix(TempName(), TmpPrefix) || TempName() == TempName() {
		t.Error("TempName: want fresh names starting TmpPrefix")
	}
}
