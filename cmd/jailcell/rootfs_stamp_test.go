package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/rootfs"
	"golang.org/x/sys/unix"
)

// waitLogLong waits for a line that follows a rootfs hash on a loaded host.
func waitLogLong(t *testing.T, s *testenv.Service, parts ...string) string {
	t.Helper()
	return s.WaitLogWithin(t, 3*time.Minute, parts...)
}

// TestServeRehashesRootfsOnlyWhenChanged (under emulation each service
// start spent 40-115 s rehashing an unchanged rootfs): the first
// start hashes the real rootfs and records it; a restart trusts that hash
// because nothing in the tree changed, and still builds sandboxes that run.
func TestServeRehashesRootfsOnlyWhenChanged(t *testing.T) {
	svc := startServe(t, "root", "")
	waitLogLong(t, svc, "rootfs content matches its manifest", `"hashed":true`, "no earlier hash recorded")
	if err := svc.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	again := svc.Restart(t)
	waitLogLong(t, again, "rootfs content matches its manifest", `"hashed":false`, "metadata unchanged since the full hash")
	status, body := curl(t, again.Sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", `{}`)
	w := decode(t, body)
	if status != 201 || !w.OK {
		t.Fatalf("create after a stamped start: %d %s", status, body)
	}
	status, body = curl(t, again.Sock, "http://jailcell/v1/sessions/"+w.Session+"/exec", "-d", `{"code":"print(6 * 7)"}`)
	if w := decode(t, body); status != 200 || w.Result == nil || w.Result.Stdout != "42\n" {
		t.Fatalf("exec after a stamped start: %d %s", status, body)
	}
}

// tinyRootfs seals a small tree whose every entry is older than the
// stamp's racy margin; conf is a file of it.
func tinyRootfs(t *testing.T) (vdir, conf string, past time.Time) {
	t.Helper()
	base := t.TempDir()
	vdir = filepath.Join(base, "bookworm-tiny-000000000001")
	root := filepath.Join(vdir, "root")
	for _, d := range []string{"usr/bin", "etc", "tmp", "work"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/python3"), []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf = filepath.Join(root, "etc/pip.conf")
	if err := os.WriteFile(conf, []byte("[global]\nno-index = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A tree changed in the last 2 s gets no stamp (racy ctimes).
	past = time.Now().Add(-time.Hour)
	for _, p := range []string{conf, filepath.Join(root, "usr/bin/python3")} {
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rootfs.Seal(vdir, nil, "3.11.2", rootfs.Profile{}); err != nil {
		t.Fatal(err)
	}
	return vdir, conf, past
}

func serveTiny(t *testing.T, vdir string) *testenv.Service {
	t.Helper()
	return testenv.StartServe(t, testenv.Serve{
		Env: []string{"JAILCELL_TEST_MAIN=1"},
		Config: func(dir string) string {
			return testenv.ServeConfig(dir, "root", vdir) + "log:\n  level: debug\n  format: json\n"
		},
	})
}

// TestServeRefusesRootfsChangedSinceStamp: a rootfs whose file is
// rewritten between two starts (same size, mtime set back) is hashed again
// at the restart, found corrupt, and no sandbox is built from it.
func TestServeRefusesRootfsChangedSinceStamp(t *testing.T) {
	vdir, conf, past := tinyRootfs(t)
	time.Sleep(2500 * time.Millisecond)
	svc := serveTiny(t, vdir)
	waitLogLong(t, svc, "rootfs content matches its manifest", `"hashed":true`)
	if err := svc.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	f, err := os.OpenFile(conf, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("[GLOBAL]"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(conf, past, past); err != nil {
		t.Fatal(err)
	}
	again := svc.Restart(t)
	waitLogLong(t, again, "rootfs content check failed", "metadata changed since the last full hash", "tree hashes to")
	refusesSessions(t, again)
}

// TestServeRefusesRootfsWrittenThroughMapping: the attack of a write
// through a writable MAP_SHARED mapping whose page was already dirty at
// the first start (no time moves). The first start sees the mapping (this
// test process holds it), records no stamp and says so; the restart hashes
// again and refuses the changed tree.
func TestServeRefusesRootfsWrittenThroughMapping(t *testing.T) {
	vdir, conf, _ := tinyRootfs(t)
	f, err := os.OpenFile(conf, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, len("[global]"), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	poke(b, b[0]) // dirties the page, content unchanged: its times move now
	time.Sleep(2500 * time.Millisecond)
	svc := serveTiny(t, vdir)
	waitLogLong(t, svc, "rootfs content matches its manifest", `"hashed":true`,
		fmt.Sprintf("etc/pip.conf is open for writing: writable shared mapping by pid %d (", os.Getpid()))
	if err := svc.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	var before, after unix.Stat_t
	unix.Stat(conf, &before)
	copy(b, "[GLOBAL]")
	unix.Stat(conf, &after)
	t.Logf("ctime moved by the write through the dirty page: %v", before.Ctim != after.Ctim)
	again := svc.Restart(t)
	waitLogLong(t, again, "rootfs content check failed", "no earlier hash recorded", "tree hashes to")
	refusesSessions(t, again)
}

func refusesSessions(t *testing.T, svc *testenv.Service) {
	t.Helper()
	status, body := curl(t, svc.Sock, "-X", "POST", "http://jailcell/v1/sessions", "-d", `{}`)
	if status == 201 || !strings.Contains(body, "make rootfs") {
		t.Fatalf("create on a rootfs changed since its stamp: %d %s; want a refusal naming make rootfs", status, body)
	}
}

// poke stores v in a page's first byte, a store the compiler cannot drop.
//
//go:noinline
func poke(b []byte, v byte) { b[0] = v }
