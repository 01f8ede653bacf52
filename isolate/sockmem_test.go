package isolate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"

	"github.com/jailcell/jailcell/policy"
)

// sockProbe fills a loopback TCP connection that is never read, then
// says so and waits.
const sockProbe = `
import os, socket, sys, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.create_connection(srv.getsockname()); a, _ = srv.accept()
c.setblocking(False)
sent = 0
try:
    while sent < 64 << 20:
        sent += c.send(b"x" * 65536)
except BlockingIOError:
    pass
print(sent, flush=True)
time.sleep(600)
`

// TestHostileSocketBuffersAreCharged: on a cgroup v1 memory controller
// the kernel charges TCP socket buffers to a cgroup only once its
// memory.kmem.tcp.limit_in_bytes is written. Unwritten, a cell's unread
// loopback connections held gigabytes outside its memory limit, up to the
// host's tcp_mem, past which every TCP socket on the host ran short. Now
// a cold start's and a fork's cgroups have the limit, and what a cell's
// unread connection holds is charged.
func TestHostileSocketBuffersAreCharged(t *testing.T) {
	if cgroups.IsCgroup2UnifiedMode() {
		t.Skip("cgroup v2 host: socket buffers are charged to the memory limit itself")
	}
	h := newTestHost(t)
	p := policy.Default()
	memDir := func(id string) string { return filepath.Join("/sys/fs/cgroup/memory", h.cfg.CgroupRoot, id) }
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		t.Skipf("the memory controller is not on a v1 hierarchy here (%v): socket buffers are charged by v2", err)
	}
	want := strconv.FormatInt(max(p.MemoryBytes/4, 16<<20), 10)
	read := func(id, name string) string {
		b, err := os.ReadFile(filepath.Join(memDir(id), name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}

	d := testDisk(t, h, p, "sockmem")
	logf, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	sb, err := d.Create(Spec{Policy: p, Args: []string{"/usr/bin/python3", "-c", sockProbe}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/work", Log: logf})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { sb.Destroy() })
	var sent string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && sent == ""; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(logf.Name())
		sent = strings.TrimSpace(string(b))
	}
	if sent == "" {
		t.Fatal("the probe never filled its connection")
	}
	if got := read(sb.ID, "memory.kmem.tcp.limit_in_bytes"); got != want {
		t.Errorf("cold start: socket buffer limit %s, want %s", got, want)
	}
	used, _ := strconv.ParseInt(read(sb.ID, "memory.kmem.tcp.usage_in_bytes"), 10, 64)
	if n, _ := strconv.ParseInt(sent, 10, 64); used < n/2 {
		t.Errorf("%s bytes sit unread in a loopback connection, %d charged to the sandbox's cgroup", sent, used)
	}

	z := startTestZygote(t, h, p)
	fork, _ := forkProbe(t, h, z, p)
	if got := read(fork.ID, "memory.kmem.tcp.limit_in_bytes"); got != want {
		t.Errorf("fork: socket buffer limit %s, want %s", got, want)
	}
}
