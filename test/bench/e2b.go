package main

import (
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The "e2b" section: E2B's stock SDK through jailcell's E2B door, beside
// the same cell over jailcell's own HTTP API from the same node client,
// and time to interactive (create, then a first command answered), on a
// server with a fresh install's defaults plus the two TCP listeners.

const benchToken = "bench-e2b-token-0123456789abcdef0123456789"

func benchE2B(dir string) {
	log.Print("e2b: E2B's stock SDK through the E2B door, beside jailcell's own API")
	if _, err := exec.LookPath("node"); err != nil {
		res.Raw["e2b_failed"] = 1
		log.Printf("e2b: no node on this host: %v (make deps installs it)", err)
		return
	}
	out, err := exec.Command("scripts/fetch-e2b-sdk.sh").Output()
	if err != nil {
		fatal("e2b: install E2B's SDKs: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	modules := filepath.Join(lines[len(lines)-1], "node_modules")
	d := filepath.Join(dir, "e2b")
	if err := os.MkdirAll(d, 0o755); err != nil {
		fatal("%v", err)
	}
	own, door := freePort(), freePort()
	tokens := filepath.Join(d, "tokens")
	if err := os.WriteFile(tokens, []byte(benchToken+" 0\n"), 0o600); err != nil {
		fatal("%v", err)
	}
	cfg := filepath.Join(d, "config.yaml")
	// Every other key at its default, as a fresh install has it.
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen: tcp://%s\ne2b:\n  listen: tcp://%s\nauth:\n  tokens_file: %s\n", own, door, tokens)), 0o644); err != nil {
		fatal("%v", err)
	}
	s := startServerConfig(d, "e2b", cfg, "debug")
	defer s.stop()
	waitPoolFull(s)
	script, err := os.ReadFile("test/bench/e2b.mjs")
	if err != nil {
		fatal("%v", err)
	}
	if err := os.WriteFile(filepath.Join(d, "e2b.mjs"), script, 0o644); err != nil {
		fatal("%v", err)
	}
	if err := os.Symlink(modules, filepath.Join(d, "node_modules")); err != nil {
		fatal("%v", err)
	}
	cmd := exec.Command("node", "e2b.mjs")
	cmd.Dir = d
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + d, "N=" + fmt.Sprint(n(200, 20)), "BURST=20",
		"E2B_API_URL=http://" + door, "E2B_SANDBOX_URL=http://" + door, "E2B_API_KEY=" + benchToken,
		"JAILCELL_URL=http://" + own, "JAILCELL_TOKEN=" + benchToken}
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		fatal("e2b: node e2b.mjs: %v", err)
	}
	var got map[string][]float64
	if err := json.Unmarshal(b, &got); err != nil {
		fatal("e2b: node e2b.mjs printed %q: %v", b, err)
	}
	for k, v := range got {
		ds := make([]time.Duration, len(v))
		for i, x := range v {
			ds[i] = time.Duration(x * float64(time.Millisecond))
		}
		res.Raw["e2b_"+k+"_p50_ms"] = pct(ds, 0.5)
		res.Raw["e2b_"+k+"_p99_ms"] = pct(ds, 0.99)
	}
}

// freePort is a loopback address no one listens on now.
func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal("%v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
