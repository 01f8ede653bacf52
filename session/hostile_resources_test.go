package session

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"
)

// Leaks: nothing of the host's layout, and no session id (its own or
// another's), is visible inside a sandbox.
func TestNoStatePathsOrSessionIDsLeakInside(t *testing.T) {
	e := newEnv(t, nil)
	a := e.create(t, CreateOptions{})
	b := e.create(t, CreateOptions{})
	res := e.exec(t, b, `
import os, glob
out = [open('/proc/self/mountinfo').read(), open('/proc/self/cgroup').read(), open('/proc/1/cmdline').read()]
for p in glob.glob('/proc/*/environ'):
    try: out.append(open(p).read())
    except OSError: pass
out.append(' '.join(os.environ.values()))
print('\n'.join(out))
`, 0)
	wantStatus(t, res, StatusOK)
	for _, secret := range []string{e.state, a, b, "/var/lib/jailcell", testCgroupRoot} {
		if strings.Contains(res.Stdout, secret) {
			t.Errorf("%q visible inside the sandbox:\n%s", secret, res.Stdout)
		}
	}
}

func TestThreadBombHitsPidsLimit(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, `
import threading, time
ev = threading.Event(); n = 0; err = None
try:
    for i in range(10000):
        threading.Thread(target=ev.wait, daemon=True).start(); n += 1
except RuntimeError as e:
    err = e
ev.set()
print(type(err).__name__, n < 10000)
`, 60*time.Second)
	wantStatus(t, res, StatusOK)
	if !strings.HasPrefix(res.Stdout, "RuntimeError True") {
		t.Fatalf("thread bomb not stopped: %q", res.Stdout)
	}
	wantStatus(t, e.exec(t, id, "print('alive')", 0), StatusOK)
}

func TestInodeFillAndFDExhaustion(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, `
import os
os.makedirs('many', exist_ok=True)
err = None
try:
    for i in range(200000):
        open(f'many/{i}', 'w').close()
except OSError as e:
    err = e.errno
print('inodes', err)
fds, ferr = [], None
try:
    while True: fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e:
    ferr = e.errno
for f in fds: os.close(f)
print('fds', ferr, len(fds) < 2000)
`, 120*time.Second)
	wantStatus(t, res, StatusOK)
	if !strings.Contains(res.Stdout, "inodes 28") || !strings.Contains(res.Stdout, "fds 24 True") {
		t.Fatalf("inode or fd limit: %q", res.Stdout)
	}
	wantStatus(t, e.exec(t, id, "import shutil; shutil.rmtree('many'); print('ok')", 120*time.Second), StatusOK)
}

func TestGigabyteOutputIsCapped(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	for _, code := range []string{
		"import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024): sys.stdout.write(chunk)",
		"import sys\nline = 'y' * 1023 + '\\n'\nchunk = line * 1024\nfor _ in range(1024): sys.stdout.write(chunk)",
	} {
		res := e.exec(t, id, code, 300*time.Second)
		wantStatus(t, res, StatusOK)
		if !res.StdoutTruncated || len(res.Stdout) > 64<<10 {
			t.Fatalf("1 GiB of output: %d bytes kept, truncated=%v", len(res.Stdout), res.StdoutTruncated)
		}
	}
}

// A one-shot cell's daemonised children die with its sandbox.
func TestDaemonisedChildrenDoNotOutliveOneShot(t *testing.T) {
	e := newEnv(t, nil)
	res, err := e.m.RunOnce(context.Background(), 0, "", ExecRequest{Code: `
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
print('spawned')
`})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("%v %+v", err, res)
	}
	if pids := sandboxProcs(); len(pids) != 0 {
		t.Fatalf("processes outlived the one-shot cell: %v", pids)
	}
}

// Another session keeps its latency while a neighbour burns CPU and forks
// to its limits: compared side by side in one run, as a ratio.
func TestNeighbourKeepsLatencyUnderHostileLoad(t *testing.T) {
	e := newEnv(t, nil)
	quiet := e.create(t, CreateOptions{})
	noisy := e.create(t, CreateOptions{})
	p50 := func() time.Duration {
		var d []time.Duration
		for i := 0; i < 20; i++ {
			start := time.Now()
			e.exec(t, quiet, "x = 1", 0)
			d = append(d, time.Since(start))
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	base := p50()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.m.Exec(context.Background(), 0, noisy, ExecRequest{Code: `
import os, time
t = time.time()
while time.time() - t < 4:
    try:
        if os.fork() == 0:
            while True: pass
    except OSError:
        pass
`, Timeout: 10 * time.Second})
	}()
	time.Sleep(time.Second)
	loaded := p50()
	<-done
	t.Logf("quiet session p50: %s alone, %s beside a fork/CPU bomb", base, loaded)
	if loaded > 20*base && loaded > 100*time.Millisecond {
		t.Fatalf("neighbour's p50 went from %s to %s under load", base, loaded)
	}
}
