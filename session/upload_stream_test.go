package session

import (
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"testing"
	"time"
)

// brokenReader gives n bytes, then fails: a client gone mid-upload.
type brokenReader struct{ n int }

func (b *brokenReader) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, errors.New("connection reset")
	}
	k := min(len(p), b.n)
	for i := range p[:k] {
		p[i] = 'z'
	}
	b.n -= k
	return k, nil
}

// TestUploadFromStreamsWholeOrNothing: a streamed upload into a live
// sandbox's workspace replaces the file only once whole, with its
// metadata; a body that breaks midway, or holds more than the sandbox's
// disk, leaves the file as it was and no part of the new one (no temporary
// file left beside it); a directory is never replaced.
func TestUploadFromStreamsWholeOrNothing(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	id := e.create(t, CreateOptions{})
	wk := e.m.Workspace()
	meta := map[string]string{"k": "v"}
	ent, err := wk.UploadFrom(ctx, 0, id, "d/up.txt", strings.NewReader("first"), meta)
	if err != nil || ent.Size != 5 || !maps.Equal(ent.Metadata, meta) {
		t.Fatalf("upload: %+v %v", ent, err)
	}
	if _, err := wk.UploadFrom(ctx, 0, id, "d/up.txt", &brokenReader{n: 200 << 10}, nil); err == nil {
		t.Fatal("an upload whose body broke succeeded")
	}
	// More than the sandbox's disk holds (the disk is full before
	// MaxFileBytes, which internal/confined's TestWriteFrom checks).
	if _, err := wk.UploadFrom(ctx, 0, id, "d/up.txt", io.LimitReader(zeros{}, MaxFileBytes+1), nil); !errors.Is(err, ErrLimit) {
		t.Fatalf("an upload larger than the disk: %v, want a limit error", err)
	}
	if _, err := wk.UploadFrom(ctx, 0, id, "d", strings.NewReader("x"), nil); !errors.Is(err, ErrBadRequest) {
		t.Errorf("an upload onto a directory: %v, want a bad request", err)
	}
	res := e.exec(t, id, "import os\nprint(open('d/up.txt').read(), sorted(os.listdir('d')), os.getxattr('d/up.txt', 'user.e2b.k').decode())", 0)
	if got := strings.TrimSpace(res.Stdout); got != "first ['up.txt'] v" {
		t.Errorf("after a broken and a too large upload the sandbox reads %q (%+v), want the first file alone", got, res.Error)
	}
	if _, err := wk.UploadFrom(ctx, 0, id, "d/up.txt", strings.NewReader("second"), nil); err != nil {
		t.Fatal(err)
	}
	res = e.exec(t, id, "import os\nprint(open('d/up.txt').read(), os.listxattr('d/up.txt'))", 0)
	if got := strings.TrimSpace(res.Stdout); got != "second []" {
		t.Errorf("a replacing upload with no metadata reads %q, want the new bytes and none", got)
	}
}

// TestUploadFromOverAFileIsAWrite: a streamed upload over an existing
// file keeps its inode, so a watch of its directory sees it written (E2B's
// watch test waits for that event), not removed and made anew.
func TestUploadFromOverAFileIsAWrite(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	id := e.create(t, CreateOptions{})
	wk := e.m.Workspace()
	if _, err := wk.UploadFrom(ctx, 0, id, "w/f.txt", strings.NewReader("one"), nil); err != nil {
		t.Fatal(err)
	}
	w, err := wk.Watch(ctx, 0, id, WatchRequest{Action: WatchStart, Path: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wk.UploadFrom(ctx, 0, id, "w/f.txt", strings.NewReader("two, longer"), nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(watchMinInterval)
	got, err := wk.Watch(ctx, 0, id, WatchRequest{Action: WatchPoll, Watch: w.Watch})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 1 || got.Events[0].Type != EventWrite || got.Events[0].Name != "f.txt" {
		t.Errorf("events after an upload over f.txt: %+v, want one write of f.txt", got.Events)
	}
}

// TestUploadFromOverAFileNearlyFull: an upload over a file whose bytes fit
// the disk once but not twice (the new file, then its copy into the old
// one's inode) is still whole: the copy that runs out of space gives way
// to a rename of the new file over the old.
func TestUploadFromOverAFileNearlyFull(t *testing.T) {
	e := newEnv(t, nil) // a 64 MiB disk
	ctx := context.Background()
	id := e.create(t, CreateOptions{})
	wk := e.m.Workspace()
	if _, err := wk.UploadFrom(ctx, 0, id, "big.bin", strings.NewReader("small"), nil); err != nil {
		t.Fatal(err)
	}
	ent, err := wk.UploadFrom(ctx, 0, id, "big.bin", io.LimitReader(zeros{}, 40<<20), nil)
	if err != nil || ent.Size != 40<<20 {
		t.Fatalf("40 MiB over a small file on a 64 MiB disk: %+v %v", ent, err)
	}
	res := e.exec(t, id, "import os\nprint(os.path.getsize('big.bin'), open('big.bin','rb').read(5) == bytes(5), sorted(os.listdir('.')))", 0)
	if got := strings.TrimSpace(res.Stdout); !strings.HasPrefix(got, "41943040 True") || strings.Contains(got, "jailcell-upload") {
		t.Errorf("the sandbox reads %q (%+v), want the whole 40 MiB and nothing beside it", got, res.Error)
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
