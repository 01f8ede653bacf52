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

// testFiles are js/'s test files, each with how many tests it has at
// least: all must pass, none skipped.
var testFiles = map[string]int{
	"lifecycle.test.mjs": 9,
}

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
auth:
  tokens_file: ` + tokens + "\n"
		},
	})
	return "http://" + addr, svc
}

// TestStockSDK runs every js/ file with node's test runner, each in its
// own node, against one service.
func TestStockSDK(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := stage(t, sdk(t))
	url, _ := serveE2B(t)
	type outcome struct {
		file string
		err  error
		tap  string
	}
	done := make(chan outcome, len(testFiles))
	for file := range testFiles {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=tap", file)
			cmd.Dir = dir
			home, err := os.MkdirTemp(dir, "home")
			if err != nil {
				done <- outcome{file, err, ""}
				return
			}
			// Only what E2B's docs tell a user to set, and nothing of
			// the host's: the SDKs would read E2B_* from it.
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home,
				"E2B_API_URL=" + url, "E2B_SANDBOX_URL=" + url, "E2B_API_KEY=" + apiKey}, testenv.HermeticEnv()...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err = cmd.Run()
			done <- outcome{file, err, out.String()}
		}()
	}
	total := map[string]int{}
	for range testFiles {
		o := <-done
		counts := map[string]int{}
		for _, m := range regexp.MustCompile(`(?m)^# (tests|pass|fail|skipped|todo|cancelled) (\d+)$`).FindAllStringSubmatch(o.tap, -1) {
			counts[m[1]], _ = strconv.Atoi(m[2])
		}
		for k, v := range counts {
			total[k] += v
		}
		if want := testFiles[o.file]; o.err != nil || counts["fail"] != 0 || counts["skipped"] != 0 || counts["todo"] != 0 || counts["cancelled"] != 0 || counts["pass"] < want {
			t.Errorf("node --test %s: %v, %v; want every one of at least %d tests to pass, none skipped\n%s", o.file, o.err, counts, want, o.tap)
			continue
		}
		t.Logf("node --test %s: %v", o.file, counts)
	}
	t.Logf("stock SDK tests: %d passed of %d", total["pass"], total["tests"])
}
