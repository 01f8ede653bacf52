package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/policy"
)

// The sparse-file attack on the host disk: a session limited to 16 MiB of
// disk makes 32 files of 16 MiB that each hold a few bytes (4 KiB of its
// tmpfs apiece). A dense copy of its workspace (hibernate, snapshot,
// persist) writes 512 MiB to the host per copy, and a persisted copy no
// longer fits the disk it came from.

const sparseDisk = 16 << 20

// sparseCell makes the 32 files; sparseCheck prints what each holds.
const sparseCell = `for i in range(32):
    with open(f"sparse{i}", "wb") as f:
        f.seek(8 << 20); f.write(b"mid")
        f.seek((16 << 20) - 1); f.write(b"z")
print("ok")
`

const sparseCheck = `import os
bad = []
for i in range(32):
    with open(f"sparse{i}", "rb") as f:
        b = f.read()
    if len(b) != 16 << 20 or b[(16 << 20) - 1:] != b"z" or b[8 << 20:(8 << 20) + 3] != b"mid" or b[:4096] != bytes(4096):
        bad.append(i)
print("intact" if not bad else f"damaged {bad}")
`

// sparseEnv is a manager whose default policy has a 16 MiB disk, with
// mod applied to its config.
func sparseEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	return newEnv(t, func(c *Config) {
		p := c.Policies["default"]
		p.DiskBytes = sparseDisk
		c.Policies = map[string]policy.Policy{"default": p}
		if mod != nil {
			mod(c)
		}
	})
}

// sparseSession creates a session (persisted under persist, if set) and
// makes the 32 sparse files in it.
func sparseSession(t *testing.T, e *env, persist string) string {
	t.Helper()
	id := e.create(t, CreateOptions{Persist: persist})
	res := e.exec(t, id, sparseCell, 60*time.Second)
	if res.Status != StatusOK || res.Stdout != "ok\n" {
		t.Fatalf("making sparse files: %+v", res)
	}
	return id
}

func sessionDir(t *testing.T, m *Manager, id string) string {
	t.Helper()
	s, err := m.get(0, id)
	if err != nil {
		t.Fatal(err)
	}
	return s.dir
}

// wantSmall fails if the tree at path allocates more than 2 MiB on the
// host (the sparse files allocate 32 * 8 KiB there).
func wantSmall(t *testing.T, what, path string) {
	t.Helper()
	if n := allocatedBytes(path); n > 2<<20 {
		t.Errorf("%s allocates %d MiB on the host (du), want under 2 MiB: the files hold 32 * 2 pages, their apparent size is 512 MiB", what, mib(n))
	} else if n == 0 {
		t.Errorf("%s allocates nothing: not there?", what)
	}
}

// TestHostileSparseFilesPersist: the persisted copy keeps the holes, and
// restores into a session of the same 16 MiB disk.
func TestHostileSparseFilesPersist(t *testing.T) {
	e := sparseEnv(t, nil)
	id := sparseSession(t, e, "sparse")
	wantSmall(t, "the persisted workspace", filepath.Join(e.state, "store"))
	if err := e.m.Close(context.Background(), 0, id); err != nil {
		t.Fatal(err)
	}
	info, err := e.m.Create(context.Background(), CreateOptions{Persist: "sparse"})
	if err != nil {
		t.Fatalf("the persisted workspace does not restore into the limits of the session that made it: %v", err)
	}
	if len(info.Restored) != 32 {
		t.Errorf("restored %d files, want 32: %v", len(info.Restored), info.Restored)
	}
	if res := e.exec(t, info.ID, sparseCheck, 60*time.Second); res.Stdout != "intact\n" {
		t.Fatalf("restored files: %+v", res)
	}
}

// TestHostileSparseFilesSnapshot: a snapshot's copy of the files keeps the
// holes; a rollback brings them back.
func TestHostileSparseFilesSnapshot(t *testing.T) {
	requiresCriu(t)
	e := sparseEnv(t, nil)
	id := sparseSession(t, e, "")
	if _, err := e.m.Durability().Snapshot(context.Background(), 0, id); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	wantSmall(t, "the snapshot's files", filepath.Join(sessionDir(t, e.m, id), snapshotName, savedName))
	e.exec(t, id, "import os\nfor i in range(32): os.remove(f'sparse{i}')", 0)
	if _, err := e.m.Durability().Rollback(context.Background(), 0, id); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if res := e.exec(t, id, sparseCheck, 60*time.Second); res.Stdout != "intact\n" {
		t.Fatalf("files after rollback: %+v", res)
	}
}

// TestHostileSparseFilesHibernate: a hibernation's copy of the files keeps
// the holes; the session restores with them.
func TestHostileSparseFilesHibernate(t *testing.T) {
	requiresCriu(t)
	e := sparseEnv(t, nil)
	id := sparseSession(t, e, "")
	if _, err := e.m.Durability().Hibernate(context.Background(), 0, id); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	wantSmall(t, "the hibernated session's files", filepath.Join(sessionDir(t, e.m, id), savedName))
	if res := e.exec(t, id, sparseCheck, 60*time.Second); res.Stdout != "intact\n" {
		t.Fatalf("files after hibernation: %+v", res)
	}
}

// TestStateQuotaRefusesSnapshot: a snapshot that would pass the state
// quota is refused with ErrStateQuota (wire code limit) naming the key,
// whether the images or the files would pass it, and leaves nothing
// charged or on disk behind.
func TestStateQuotaRefusesSnapshot(t *testing.T) {
	requiresCriu(t)
	// Room for the images' reservation (memory_bytes + 32 MiB) and 4 MiB
	// of files: a 12 MiB file does not fit.
	var reserve int64
	e := newEnv(t, func(c *Config) {
		reserve = imagesReserve(c.Policies["default"])
		c.StateQuota = reserve + 4<<20
	})
	id := e.create(t, CreateOptions{})
	if res := e.exec(t, id, "open('dense', 'wb').write(b'x' * (12 << 20))", 0); res.Status != StatusOK {
		t.Fatalf("cell: %+v", res)
	}
	_, err := e.m.Durability().Snapshot(context.Background(), 0, id)
	if !errors.Is(err, ErrStateQuota) || !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "state_quota_bytes") {
		t.Fatalf("snapshot over the state quota: %v, want ErrStateQuota naming state_quota_bytes", err)
	}
	if n := e.m.dur.stateQuota.inUse(); n != 0 {
		t.Errorf("a refused snapshot left %d bytes charged", n)
	}
	dir := sessionDir(t, e.m, id)
	if n := allocatedBytes(dir); n > 64<<10 {
		t.Errorf("a refused snapshot left %d KiB in the session dir", n>>10)
	}
	// Too small for the images at all.
	e.m.dur.stateQuota.limit = reserve - 1
	if _, err := e.m.Durability().Snapshot(context.Background(), 0, id); !errors.Is(err, ErrStateQuota) || !strings.Contains(err.Error(), "state_quota_bytes") {
		t.Fatalf("snapshot with no room for its images: %v", err)
	}
	// The session goes on.
	if res := e.exec(t, id, "print(len(open('dense','rb').read()))", 0); res.Stdout != "12582912\n" {
		t.Fatalf("session after refused snapshots: %+v", res)
	}
}

// TestPersistWithinDiskAndStoreQuota: a file that would make the persisted
// workspace larger than its session's disk (less the restore headroom), or
// pass the store quota, is not persisted; the store holds no more than
// allowed and what it holds restores.
func TestPersistWithinDiskAndStoreQuota(t *testing.T) {
	e := sparseEnv(t, func(c *Config) { c.StoreQuota = 24 << 20 })
	id := e.create(t, CreateOptions{Persist: "full"})
	// 15.2 MiB: fits the 16 MiB disk, not 16 MiB less 1 MiB of headroom.
	res := e.exec(t, id, "open('big', 'wb').write(b'x' * (15 << 20 | 200 << 10)); open('small', 'wb').write(b'y' * 4096)", 0)
	if res.Status != StatusOK {
		t.Fatalf("cell: %+v", res)
	}
	store := filepath.Join(e.state, "store")
	if n := allocatedBytes(store); n > sparseDisk-restoreHeadroom {
		t.Errorf("store holds %d KiB, more than the session's disk less the headroom", n>>10)
	}
	// The store quota: two sessions' workspaces of 10 MiB do not fit 24 MiB
	// with a third.
	for _, name := range []string{"a", "b", "c"} {
		sid := e.create(t, CreateOptions{Persist: name})
		if res := e.exec(t, sid, "open('ten', 'wb').write(b'z' * (10 << 20))", 0); res.Status != StatusOK {
			t.Fatalf("cell: %+v", res)
		}
		if err := e.m.Close(context.Background(), 0, sid); err != nil {
			t.Fatal(err)
		}
	}
	if n := allocatedBytes(store); n > 24<<20 {
		t.Errorf("store holds %d KiB, more than its 24 MiB quota", n>>10)
	}
	if err := e.m.Close(context.Background(), 0, id); err != nil {
		t.Fatal(err)
	}
	info, err := e.m.Create(context.Background(), CreateOptions{Persist: "full"})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if len(info.Restored) != 1 || info.Restored[0] != "small" {
		t.Errorf("restored %v, want only small", info.Restored)
	}
}

// saveWorkspace runs the copy hibernation and snapshots make of session
// id's files (into the state dir's upper-saved), without criu.
func saveWorkspace(t *testing.T, m *Manager, id string) (string, error) {
	t.Helper()
	s, err := m.claim(context.Background(), 0, id)
	if err != nil {
		t.Fatal(err)
	}
	defer s.run.Unlock()
	return filepath.Join(s.dir, savedName), m.dur.saveUpper(s)
}

// TestHostileSparseFilesWorkspaceCopy: the copy of a workspace into the
// state dir (hibernation's and snapshots' upper-saved) takes what the files
// allocate, not their apparent 512 MiB.
func TestHostileSparseFilesWorkspaceCopy(t *testing.T) {
	e := sparseEnv(t, nil)
	id := sparseSession(t, e, "")
	saved, err := saveWorkspace(t, e.m, id)
	if err != nil {
		t.Fatalf("copy of the workspace: %v", err)
	}
	wantSmall(t, "the copy of the workspace", saved)
}

// TestHostileEmptyDirsWorkspaceCopy: directories cost a tmpfs nothing but
// a block each on the host; 6000 of them beside 12 MiB of data would make
// a copy of a 16 MiB disk take 35 MiB. The copy stays within the session's
// disk limit or is refused with ErrLimit naming it.
func TestHostileEmptyDirsWorkspaceCopy(t *testing.T) {
	e := sparseEnv(t, nil)
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, "import os\nfor i in range(6000): os.mkdir(f'd{i}')\nopen('data', 'wb').write(b'x' * (12 << 20))\nprint('ok')", 60*time.Second)
	if res.Stdout != "ok\n" {
		t.Fatalf("cell: %+v", res)
	}
	saved, err := saveWorkspace(t, e.m, id)
	if err == nil {
		if n := allocatedBytes(saved); n > sparseDisk {
			t.Fatalf("the copy of a %d MiB disk allocates %d MiB on the host", sparseDisk>>20, mib(n))
		}
		t.Fatal("the copy fit the disk limit: the test does not exercise it")
	}
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "disk_bytes") {
		t.Fatalf("copy over the disk limit: %v, want ErrLimit naming disk_bytes", err)
	}
	if n := allocatedBytes(saved); n != 0 {
		t.Errorf("a refused copy left %d KiB behind", n>>10)
	}
	if n := e.m.dur.stateQuota.inUse(); n != 0 {
		t.Errorf("a refused copy left %d bytes charged", n)
	}
}

// TestStateQuotaRefusesWorkspaceCopy: a copy that would pass the state
// quota stops there with ErrStateQuota (wire code limit) naming
// state_quota_bytes, and leaves nothing charged or on disk.
func TestStateQuotaRefusesWorkspaceCopy(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StateQuota = 4 << 20 })
	id := e.create(t, CreateOptions{})
	if res := e.exec(t, id, "open('dense', 'wb').write(b'x' * (12 << 20))", 0); res.Status != StatusOK {
		t.Fatalf("cell: %+v", res)
	}
	saved, err := saveWorkspace(t, e.m, id)
	if !errors.Is(err, ErrStateQuota) || !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "state_quota_bytes") {
		t.Fatalf("copy over the state quota: %v, want ErrStateQuota naming state_quota_bytes", err)
	}
	if n := allocatedBytes(saved); n != 0 {
		t.Errorf("a refused copy left %d KiB behind", n>>10)
	}
	if n := e.m.dur.stateQuota.inUse(); n != 0 {
		t.Errorf("a refused copy left %d bytes charged", n)
	}
	// Within the quota, the copy is charged what it allocates, and the
	// charge goes with the session.
	e.m.dur.stateQuota.limit = 64 << 20
	if _, err := saveWorkspace(t, e.m, id); err != nil {
		t.Fatalf("copy within the quota: %v", err)
	}
	if n := e.m.dur.stateQuota.inUse(); n < 12<<20 || n > 13<<20 {
		t.Errorf("copy of 12 MiB charged %d bytes", n)
	}
	if err := e.m.Close(context.Background(), 0, id); err != nil {
		t.Fatal(err)
	}
	if n := e.m.dur.stateQuota.inUse(); n != 0 {
		t.Errorf("a closed session left %d bytes charged", n)
	}
}

// TestHostileEmptyDirsPersist: 6000 directories holding an empty file
// each take no bytes of a tmpfs and 24 MiB of the host's store; the
// persisted workspace stays within its session's 16 MiB disk.
func TestHostileEmptyDirsPersist(t *testing.T) {
	e := sparseEnv(t, nil)
	id := e.create(t, CreateOptions{Persist: "dirs"})
	res := e.exec(t, id, "import os\nfor i in range(6000):\n    os.mkdir(f'd{i}'); open(f'd{i}/f', 'w').close()\nprint('ok')", 60*time.Second)
	if res.Stdout != "ok\n" {
		t.Fatalf("cell: %+v", res)
	}
	if n := allocatedBytes(filepath.Join(e.state, "store")); n > sparseDisk {
		t.Fatalf("the persisted workspace of a %d MiB disk allocates %d MiB on the host", sparseDisk>>20, mib(n))
	}
	if err := e.m.Close(context.Background(), 0, id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Create(context.Background(), CreateOptions{Persist: "dirs"}); err != nil {
		t.Fatalf("the persisted workspace does not restore: %v", err)
	}
}

// TestQuotaLedger: charges past the limit are refused naming the key;
// release drops a path and what is below it; rename moves charges.
func TestQuotaLedger(t *testing.T) {
	q := newQuota("state_quota_bytes", ErrStateQuota, 10<<20)
	if err := q.charge("/s/a/images", 6<<20); err != nil {
		t.Fatal(err)
	}
	if err := q.charge("/s/a.new/upper-saved", 3<<20); err != nil {
		t.Fatal(err)
	}
	err := q.charge("/s/b/images", 2<<20)
	if !errors.Is(err, ErrStateQuota) || !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "state_quota_bytes = 10 MiB") {
		t.Fatalf("charge past the limit: %v", err)
	}
	q.rename("/s/a.new", "/s/b")
	q.release("/s/a")
	if q.inUse() != 3<<20 {
		t.Fatalf("after release of /s/a: %d in use, want 3 MiB (/s/a.new is not below /s/a)", q.inUse())
	}
	q.release("/s/b")
	q.force("x", 20<<20)
	if q.inUse() != 20<<20 || q.charge("y", 1) == nil {
		t.Fatalf("force: %d in use", q.inUse())
	}
}

// TestHostileSparseFilesPersistToS3: an object store keeps files dense,
// so sparse files that each fit the disk were each stored whole (8 of
// 4 MiB from a 16 MiB disk: 32 MiB stored, a workspace no create could
// restore, and the node's store quota filled for every owner). The
// entry is held to what the disk can restore: the files past it are
// refused, and the workspace restores.
func TestHostileSparseFilesPersistToS3(t *testing.T) {
	srv := testenv.StartS3(t)
	e := sparseEnv(t, useS3(t, srv))
	id := e.create(t, CreateOptions{Persist: "sparse"})
	res := e.exec(t, id, `for i in range(8):
    with open(f"sparse{i}", "wb") as f:
        f.seek((4 << 20) - 1); f.write(b"z")
print("ok")
`, 60*time.Second)
	if res.Status != StatusOK || res.Stdout != "ok\n" {
		t.Fatalf("sparse cell: %+v", res)
	}
	if err := e.m.Close(context.Background(), 0, id); err != nil {
		t.Fatal(err)
	}
	var stored int64
	for i := range 8 {
		if fi, err := os.Stat(srv.ObjectPath(fmt.Sprintf("node/uid=0/sparse/sparse%d", i))); err == nil {
			stored += fi.Size()
		}
	}
	if stored > sparseDisk {
		t.Errorf("%d MiB stored for a %d MiB disk", stored>>20, sparseDisk>>20)
	}
	info, err := e.m.Create(context.Background(), CreateOptions{Persist: "sparse"})
	if err != nil {
		t.Fatalf("the persisted workspace does not restore into the limits of the session that made it: %v", err)
	}
	if n := len(info.Restored); n == 0 || n == 8 {
		t.Errorf("restored %d of 8 files, want those that fit the disk (3)", n)
	}
	t.Logf("stored %d MiB, restored %v", stored>>20, info.Restored)
}
