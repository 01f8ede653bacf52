package e2bsdk

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.Hermetic()
	code := m.Run()
	testenv.RemoveBuild()
	os.Exit(code)
}

// apiKey is the E2B API key: a token of the service's tokens file, owner
// uid 1000.
const apiKey = "e2b-sdk-test-key-0123456789abcdef0123"

// sdk installs (once) the pinned SDKs and returns the directory holding
// node_modules.
func sdk(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("requires node: not available on this host (%v); make deps installs it", err)
	}
	out, err := exec.Command("../../scripts/fetch-e2b-sdk.sh").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("install E2B's SDKs: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// stage copies js/'s test files into a fresh directory beside the
// installed node_modules (a symlink), so node resolves the stock SDKs.
func stage(t *testing.T, modules string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("js")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(modules, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// e2bDomain is the service's e2b.domain: the SDKs' getHost names
// PORT-ID.e2bDomain, which the tests send as the Host header to the door's
// own address (no resolver needed).
const e2bDomain = "sandbox.jailcell.test"

// serveE2B starts a service with its E2B door on a loopback port and
// returns the door's URL.
func serveE2B(t *testing.T) (url string, svc *testenv.Service) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	svc = testenv.StartServe(t, testenv.Serve{
		Bin:       testenv.Jailcell(t),
		CleanExit: true,
		Config: func(d string) string {
			tokens := filepath.Join(d, "tokens")
			if err := os.WriteFile(tokens, []byte(apiKey+" 1000\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return testenv.ServeConfig(d, "root", testenv.Rootfs(t).Root) + `log:
  level: info
sessions:
  max: 24
drain_grace: 20s
policies:
  default:
    memory_bytes: 512MiB
    pids: 64
    disk_bytes: 64MiB
    timeout: 10s
e2b:
  listen: tcp://` + addr + `
  domain: ` + e2bDomain + `
  public_ports: true
auth:
  tokens_file: ` + tokens + "\n"
		},
	})
	return "http://" + addr, svc
}

// TestStockSDK runs each js/*.test.mjs with node's test runner, each in
// its own node (a subtest, so -run TestStockSDK/files selects one), all
// at once against one service. Every test in a file must pass, none
// skipped or left as todo.
func TestStockSDK(t *testing.T) {
	testenv.RequiresRoot(t)
	files, err := filepath.Glob("js/*.test.mjs")
	if err != nil || len(files) == 0 {
		t.Fatalf("no js/*.test.mjs: %v", err)
	}
	dir := stage(t, sdk(t))
	url, _ := serveE2B(t)
	var mu sync.Mutex
	total := map[string]int{}
	t.Cleanup(func() { t.Logf("stock SDK tests: %d passed of %d", total["pass"], total["tests"]) })
	for _, f := range files {
		file := filepath.Base(f)
		t.Run(strings.TrimSuffix(file, ".test.mjs"), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=tap", file)
			cmd.Dir = dir
			home, err := os.MkdirTemp(dir, "home")
			if err != nil {
				t.Fatal(err)
			}
			// Only what E2B's docs tell a user to set, and nothing of
			// the host's: the SDKs would read E2B_* from it.
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home,
				"E2B_API_URL=" + url, "E2B_SANDBOX_URL=" + url, "E2B_API_KEY=" + apiKey, "JC_E2B_DOMAIN=" + e2bDomain}, testenv.HermeticEnv()...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err = cmd.Run()
			tap := out.String()
			counts := map[string]int{}
			for _, m := range regexp.MustCompile(`(?m)^# (tests|pass|fail|skipped|todo|cancelled) (\d+)$`).FindAllStringSubmatch(tap, -1) {
				counts[m[1]], _ = strconv.Atoi(m[2])
			}
			mu.Lock()
			for k, v := range counts {
				total[k] += v
			}
			mu.Unlock()
			if err != nil || counts["tests"] == 0 || counts["pass"] != counts["tests"] || counts["skipped"] != 0 || counts["todo"] != 0 {
				t.Fatalf("node --test %s: %v, %v; want every test to pass, none skipped\n%s", file, err, counts, tap)
			}
			t.Logf("node --test %s: %v", file, counts)
		})
	}
}
