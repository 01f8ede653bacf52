package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
)

// TestUpperTarNoNodeTakesBackIsNotStored: saved files whose tar would be
// over what an import takes back (many empty files: headers count against
// no disk) are refused before the upload, as ErrLimit, so the session
// stays hibernated here rather than handed to the store and refused by
// every take.
func TestUpperTarNoNodeTakesBackIsNotStored(t *testing.T) {
	dir := t.TempDir()
	saved := filepath.Join(dir, savedName)
	if err := os.MkdirAll(saved, 0o700); err != nil {
		t.Fatal(err)
	}
	p := policy.Default()
	p.DiskBytes = 1 << 20
	long := strings.Repeat("n", 200)
	for i := range 50000 { // about 1.5 KiB of tar each: 75 MB
		f, err := os.Create(filepath.Join(saved, fmt.Sprintf("%s%06d", long, i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	put := func(name string, r io.Reader, size int64) error {
		t.Errorf("uploaded %s (%d bytes), want it refused first (at most %d)", name, size, upperTarMax(p.DiskBytes))
		return nil
	}
	err := (&durable{}).putUpper(put, &Session{id: "s", dir: dir, policy: p})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("putUpper = %v, want ErrLimit", err)
	}
	t.Logf("refused: %v", err)
}

// TestTakesOfOtherSessionsDoNotWait: a take from the store holds only its
// own session's id: a lookup of another id (another owner's, a mistyped
// one) goes on at once, and a second take of the same id waits only as
// long as its request does.
func TestTakesOfOtherSessionsDoNotWait(t *testing.T) {
	m := &Manager{}
	unlockA, err := m.lockTake(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		unlockB, err := m.lockTake(context.Background(), "b")
		if err == nil {
			unlockB()
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a take of another id waits for the first")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := m.lockTake(ctx, "a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a second take of the same id, its request ended: %v, want ErrUnavailable", err)
	}
	unlockA()
	unlock, err := m.lockTake(context.Background(), "a")
	if err != nil {
		t.Fatalf("the id once its take ended: %v", err)
	}
	unlock()
}
