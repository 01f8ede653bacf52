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
	var m takeLocks
	unlockA, err := m.lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		unlockB, err := m.lock(context.Background(), "b")
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
	if _, err := m.lock(ctx, "a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a second take of the same id, its request ended: %v, want ErrUnavailable", err)
	}
	unlockA()
	unlock, err := m.lock(context.Background(), "a")
	if err != nil {
		t.Fatalf("the id once its take ended: %v", err)
	}
	unlock()
}

// TestEndedSessionsAnswerOnlyTheirOwner: why a session ended (closed,
// expired, lost) is told to its owner and root; another owner asking for
// its id gets what an id that never was gets (it was told "closed at",
// "expired" or "lost", an existence oracle).
func TestEndedSessionsAnswerOnlyTheirOwner(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	id := e.create(t, CreateOptions{Owner: 1000})
	if err := e.m.Close(ctx, 1000, id); err != nil {
		t.Fatal(err)
	}
	never := strings.Repeat("0", len(id))
	answer := func(owner int, id string) string {
		_, err := e.m.Exec(ctx, owner, id, ExecRequest{Code: "1"})
		if err == nil {
			t.Fatalf("owner %d's exec in %s answered", owner, id)
		}
		return strings.ReplaceAll(err.Error(), id, "ID")
	}
	if got, want := answer(1001, id), answer(1001, never); got != want {
		t.Errorf("another owner asking for a closed session: %q; for an id that never was: %q", got, want)
	}
	for _, owner := range []int{1000, 0} {
		if got := answer(owner, id); !strings.Contains(got, "was closed at") {
			t.Errorf("owner %d asking for its closed session: %q, want why", owner, got)
		}
	}
	// A lost one likewise, across a restart of its record.
	e.m.dur.markLost("lost-1", 1000, "was lost for a test", LostRestart, time.Now().Add(time.Hour))
	if got, want := answer(1001, "lost-1"), answer(1001, never); got != want {
		t.Errorf("another owner asking for a lost session: %q, want %q", got, want)
	}
	if _, err := e.m.Exec(ctx, 1000, "lost-1", ExecRequest{Code: "1"}); !errors.Is(err, ErrLost) {
		t.Errorf("its owner asking for a lost session: %v, want ErrLost", err)
	}
}
