package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestDoctorCommand runs the real `jailcell doctor`: on this host every
// check passes and it builds a sandbox (exit 0); a broken rootfs path, state
// directory or config file is a clear failure (exit 1) naming what is wrong
// and how to fix it. Privileged tier.
func TestDoctorCommand(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	check := regexp.MustCompile(`(?m)^(ok|warn|note|FAIL)\s+(\S+(?: \S+)?)\s{2,}`)
	statuses := func(out string) map[string]string {
		m := map[string]string{}
		for _, s := range check.FindAllStringSubmatch(out, -1) {
			m[s[2]] = s[1]
		}
		return m
	}

	status, stdout, stderr := runBin(t, nil, "", "doctor", "--rootfs", r.Root, "--state-dir", state)
	got := statuses(stdout)
	if status != 0 || !regexp.MustCompile(`\n(all checks passed|no check failed; read the warn lines above)(; the service is not installed or not running here \(note lines\))?\n$`).MatchString(stdout) {
		t.Fatalf("doctor: exit %d\n%s\nstderr:\n%s", status, stdout, stderr)
	}
	for _, name := range []string{"kernel", "privileges", "user namespaces", "overlayfs", "idmapped mounts", "seccomp", "rootfs", "state dir", "store", "sandbox"} {
		if got[name] != "ok" {
			t.Errorf("check %q is %q, want ok:\n%s", name, got[name], stdout)
		}
	}
	if !strings.Contains(stdout, "content hash matches the manifest") || !strings.Contains(stdout, "ran print(1)") {
		t.Errorf("the rootfs was not verified or no cell ran:\n%s", stdout)
	}
	if !strings.Contains(stdout, "profile "+profileName(r.Manifest.Profile)+",") {
		t.Errorf("doctor does not name the rootfs's profile %q:\n%s", profileName(r.Manifest.Profile), stdout)
	}

	// A built, not installed jailcell: no service, and the socket
	// directory only a daemon's uid claims made (0700). The host runs
	// sandboxes, so doctor passes; the service's lines are notes.
	t.Run("no service here", func(t *testing.T) {
		run := filepath.Join(t.TempDir(), "run")
		if err := os.MkdirAll(filepath.Join(run, "claims"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(run, 0o700); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(cfg, []byte("socket: "+run+"/jailcell.sock\nsocket_group: root\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		status, stdout, _ := runBin(t, nil, "", "doctor", "--config", cfg, "--rootfs", r.Root, "--state-dir", state)
		got := statuses(stdout)
		if status != 0 || got["socket dir"] != "note" || got["sandbox"] != "ok" || strings.Contains(stdout, "FAIL") ||
			!strings.Contains(stdout, "the service is not installed or not running here") {
			t.Fatalf("doctor with no service here: exit %d\n%s", status, stdout)
		}
	})
	t.Run("missing rootfs", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "no-rootfs")
		status, stdout, _ := runBin(t, nil, "", "doctor", "--rootfs", missing, "--state-dir", state)
		got := statuses(stdout)
		if status != 1 || got["rootfs"] != "FAIL" || got["sandbox"] != "FAIL" ||
			!strings.Contains(stdout, missing+": rootfs not found") || !strings.Contains(stdout, "fix: build it with `make rootfs`") ||
			!strings.Contains(stdout, "not attempted: no usable rootfs") || !strings.Contains(stdout, "some checks FAILED") {
			t.Fatalf("doctor on a missing rootfs: exit %d\n%s", status, stdout)
		}
	})
	t.Run("state dir is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "state")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		status, stdout, _ := runBin(t, nil, "", "doctor", "--rootfs", r.Root, "--state-dir", file)
		if got := statuses(stdout); status != 1 || got["state dir"] != "FAIL" || !strings.Contains(stdout, file) {
			t.Fatalf("doctor on a file as state dir: exit %d\n%s", status, stdout)
		}
	})
	t.Run("store down", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config.yaml")
		// A loopback port nothing listens on (this test's own listener,
		// closed).
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if err := os.WriteFile(cfg, []byte("socket: "+testenv.NoServiceSocket+"\nstore:\n  url: s3://down-bucket/p\n  key_file: "+storeKeyFile(t)+"\n  timeout: 2s\n  s3:\n    endpoint: http://"+addr+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		status, stdout, _ := runBin(t, []string{"AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s"}, "", "doctor", "--config", cfg, "--rootfs", r.Root, "--state-dir", state)
		if got := statuses(stdout); status != 0 || got["store"] != "warn" || !strings.Contains(stdout, "store unavailable: store s3://down-bucket/p at http://"+addr) {
			t.Fatalf("doctor with the store down: exit %d\n%s", status, stdout)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(cfg, []byte("sesions:\n  max: 3\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		status, stdout, stderr := runBin(t, nil, "", "doctor", "--config", cfg, "--rootfs", r.Root, "--state-dir", state)
		if status != 1 || stdout != "" || !strings.Contains(stderr, cfg) || !strings.Contains(stderr, "sesions.max: unknown key; known keys:") ||
			!strings.Contains(stderr, "sessions.max") {
			t.Fatalf("doctor with a misspelt key: exit %d\nstdout:\n%s\nstderr:\n%s", status, stdout, stderr)
		}
	})
}
