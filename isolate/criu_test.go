package isolate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/policy"
)

// requiresCriu skips unless a working criu is installed (the probe says why).
func requiresCriu(t *testing.T) {
	t.Helper()
	if err := CriuCheck(); err != nil {
		t.Skip("requires a working criu (make criu): " + err.Error())
	}
}

// counterScript counts in memory and writes each value to the control bind:
// a restored process continues its count, a fresh one would start at 1.
const counterScript = `import time
n = 0
while True:
    n += 1
    with open("/run/ctl/n.tmp", "w") as f:
        f.write(str(n))
    import os; os.replace("/run/ctl/n.tmp", "/run/ctl/n")
    time.sleep(0.02)
`

func readCount(t *testing.T, ctl string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ctl, "n"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func waitCount(t *testing.T, ctl string, above int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n := readCount(t, ctl); n > above {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("count did not pass %d", above)
	return 0
}

func TestCheckpointRestore(t *testing.T) {
	h := newTestHost(t)
	requiresCriu(t)
	p := policy.Default()
	p.MemoryBytes = 300 << 20
	d, err := h.NewDisk("criu"+strconv.Itoa(time.Now().Nanosecond()), p)
	if err != nil {
		t.Fatalf("NewDisk: %v", err)
	}
	t.Cleanup(func() { _ = d.Destroy() })
	// criu opens the bind's source from inside the user namespace.
	tmp := t.TempDir()
	_ = os.Chmod(tmp, 0o711)
	_ = os.Chmod(filepath.Dir(tmp), 0o711)
	ctl := filepath.Join(tmp, "ctl")
	if err := os.Mkdir(ctl, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(ctl, 0o777)
	spec := Spec{
		Policy: p,
		Args:   []string{"/usr/bin/python3", "-c", counterScript},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Cwd:    "/work",
		Binds:  []Bind{{Source: ctl, Dest: "/run/ctl", Writable: true}},
	}
	sb, err := d.Create(spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	waitCount(t, ctl, 5)
	images := filepath.Join(t.TempDir(), "images")
	start := time.Now()
	if err := sb.Checkpoint(images, false); err != nil {
		_ = sb.Destroy()
		t.Fatalf("Checkpoint: %v", err)
	}
	dump := time.Since(start)
	<-sb.Done()
	if err := sb.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	before := readCount(t, ctl)
	if len(h.cgroupIDs()) != 0 {
		t.Errorf("cgroups left after checkpoint: %v", h.cgroupIDs())
	}
	start = time.Now()
	rs, err := d.Restore(images, spec)
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(images, "restore.log"))
		_ = os.WriteFile("/tmp/criu-restore.log", b, 0o644)
		t.Fatalf("Restore: %v", err)
	}
	restore := time.Since(start)
	t.Cleanup(func() { _ = rs.Destroy() })
	after := waitCount(t, ctl, before)
	if after != before+1 && after < before {
		t.Fatalf("count after restore %d, before %d: not the same process", after, before)
	}
	if u := rs.Usage(); u.MemoryCurrent == 0 {
		t.Errorf("restored sandbox has no memory figure: %+v", u)
	}
	t.Logf("checkpoint %v, restore %v, image %d KiB", dump, restore, dirSize(images)>>10)
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
