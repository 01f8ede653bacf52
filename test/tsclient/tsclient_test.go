package tsclient

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
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
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	testenv.RemoveBuild()
	os.Exit(code)
}

const pkg = "../../client/typescript"

// token is the TCP listener's bearer token (32 or more characters).
const token = "tsclient-test-token-0123456789abcdef"

// nodeProbe skips when node is missing or older than the package's
// engines (18.18: Symbol.asyncDispose).
func nodeProbe(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("requires node: not available on this host (%v); make deps installs it", err)
	}
	out, err := exec.Command("node", "-p", "process.versions.node").Output()
	if err != nil {
		t.Fatalf("node -p process.versions.node: %v", err)
	}
	v := strings.Split(strings.TrimSpace(string(out)), ".")
	major, _ := strconv.Atoi(v[0])
	minor, _ := strconv.Atoi(v[1])
	if major < 18 || major == 18 && minor < 18 {
		t.Skipf("requires node 18.18 or later: this host has %s", out)
	}
}

// tools installs (once) the pinned devDependencies and returns the
// directory holding node_modules.
func tools(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../../scripts/fetch-tsclient-tools.sh").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("install the TypeScript client's tools: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// stage copies the package into dir, beside the installed node_modules
// (a symlink).
func stage(t *testing.T, modules, dir string) {
	t.Helper()
	for _, name := range []string{"package.json", "package-lock.json", "tsconfig.json", "example.mjs", "src", "test"} {
		src := filepath.Join(pkg, name)
		fi, err := os.Stat(src)
		if err != nil {
			t.Fatal(err)
		}
		if fi.IsDir() {
			err = os.CopyFS(filepath.Join(dir, name), os.DirFS(src))
		} else {
			var b []byte
			if b, err = os.ReadFile(src); err == nil {
				err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
			}
		}
		if err != nil {
			t.Fatalf("copy %s: %v", name, err)
		}
	}
	if err := os.Symlink(filepath.Join(modules, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
}

// built is the package compiled once for the tests that use it; TestMain
// removes it.
var built struct {
	once sync.Once
	dir  string
	out  string
	err  error
}

// build stages the package and compiles it with the pinned tsc (strict,
// per its tsconfig.json) into dist/, once per test binary; it returns the
// staged directory.
func build(t *testing.T, modules string) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "tsclient"); built.err != nil {
			return
		}
		built.err = fmt.Errorf("staging the package in %s failed (see above)", built.dir)
		stage(t, modules, built.dir)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node_modules/.bin/tsc", "-p", "tsconfig.json")
		cmd.Dir = built.dir
		var out []byte
		out, built.err = cmd.CombinedOutput()
		built.out = string(out)
	})
	if built.err != nil {
		t.Fatalf("tsc -p client/typescript/tsconfig.json: %v\n%s", built.err, built.out)
	}
	return built.dir
}

// run runs a command in dir to its end and returns its output; a failure
// fails the test with that output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home, "NO_COLOR=1"}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestTypeScriptPackage: the package is what it says: ESM, typed, no
// runtime dependencies, Node 18.18+; tsc --strict builds a .js and a .d.ts
// of every source file; a strict user's code compiles against those
// declarations, and misuse (test/consumer.ts's @ts-expect-error lines) does
// not.
func TestTypeScriptPackage(t *testing.T) {
	nodeProbe(t)
	dir := build(t, tools(t))
	var p struct {
		Type         string            `json:"type"`
		Types        string            `json:"types"`
		Dependencies map[string]string `json:"dependencies"`
		Engines      map[string]string `json:"engines"`
		Exports      map[string]struct {
			Types  string `json:"types"`
			Import string `json:"import"`
		} `json:"exports"`
		Files []string `json:"files"`
	}
	b, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "module" || len(p.Dependencies) != 0 || p.Engines["node"] != ">=18.18" ||
		p.Exports["."].Import != "./dist/index.js" || p.Exports["."].Types != "./dist/index.d.ts" {
		t.Errorf("package.json: type %q, dependencies %v, engines %v, exports %+v; want an ESM package with types, no runtime dependencies, node >=18.18",
			p.Type, p.Dependencies, p.Engines, p.Exports)
	}
	srcs, _ := filepath.Glob(filepath.Join(dir, "src", "*.ts"))
	if len(srcs) == 0 {
		t.Fatal("no sources")
	}
	for _, s := range srcs {
		base := strings.TrimSuffix(filepath.Base(s), ".ts")
		for _, ext := range []string{".js", ".d.ts"} {
			if _, err := os.Stat(filepath.Join(dir, "dist", base+ext)); err != nil {
				t.Errorf("the build has no dist/%s%s: %v", base, ext, err)
			}
		}
	}
	// A user's strict TypeScript compiles against the shipped .d.ts, and
	// what the client refuses is a type error (test/consumer.ts).
	run(t, dir, nil, "node_modules/.bin/tsc", "-p", "test/tsconfig.consumer.json")
	// Only node's built-ins at run time.
	js, _ := filepath.Glob(filepath.Join(dir, "dist", "*.js"))
	imp := regexp.MustCompile(`(?m)^\s*import\b[^"']*["']([^"']+)["']`)
	for _, f := range js {
		b, _ := os.ReadFile(f)
		for _, m := range imp.FindAllStringSubmatch(string(b), -1) {
			if !strings.HasPrefix(m[1], "node:") && !strings.HasPrefix(m[1], "./") {
				t.Errorf("%s imports %q: the package may import only node: built-ins and its own files", filepath.Base(f), m[1])
			}
		}
	}
}

// TestTypeScriptWireTypesMatchOpenAPI: the client's hand-written wire
// types (src/wire.ts) have exactly the fields api/openapi.json documents,
// and every value the document allows fits them (test/drift.ts, compiled
// against openapi-typescript's output); and the check fails for a
// document with a field the client lacks, so it is not vacuous.
func TestTypeScriptWireTypesMatchOpenAPI(t *testing.T) {
	nodeProbe(t)
	dir := t.TempDir()
	stage(t, tools(t), dir)
	check := func(doc string) (bool, string) {
		run(t, dir, nil, "node_modules/.bin/openapi-typescript", doc, "-o", filepath.Join(dir, "test", "schema.d.ts"))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node_modules/.bin/tsc", "-p", "test/tsconfig.json")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return err == nil, string(out)
	}
	docPath, err := filepath.Abs("../../api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if ok, out := check(docPath); !ok {
		t.Fatalf("client/typescript/src/wire.ts drifted from api/openapi.json:\n%s", out)
	}
	// A field the server starts sending that the client does not know.
	var d map[string]any
	b, _ := os.ReadFile(docPath)
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	res := d["components"].(map[string]any)["schemas"].(map[string]any)["Result"].(map[string]any)
	res["properties"].(map[string]any)["new_field"] = map[string]any{"type": "string"}
	changed := filepath.Join(t.TempDir(), "openapi.json")
	b, _ = json.Marshal(d)
	if err := os.WriteFile(changed, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, out := check(changed); ok || !strings.Contains(out, "new_field") {
		t.Errorf("the drift check passed a document whose Result has a field the client lacks (ok %v):\n%s", ok, out)
	}
}

// TestTypeScriptClient runs the package's tests (node --test) against one
// real service, through its Unix socket and its TCP listener with a bearer
// token, and against `jailcell json` processes: state across cells, an
// error's traceback, a PNG figure and its chart data, exit codes, raw
// ANSI text, envs, clear_output, files both ways, a timeout that keeps
// state, streamed callbacks in order, typed errors, interrupt, two
// sandboxes at once, hibernate and restore; and E2B's names for the
// server's commands (foreground, streamed, background), file ops and
// watches, info, timeout, metrics and connect.
func TestTypeScriptClient(t *testing.T) {
	nodeProbe(t)
	testenv.RequiresRoot(t)
	dir := build(t, tools(t))
	bin := testenv.Jailcell(t)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	svc := testenv.StartServe(t, testenv.Serve{
		Bin:       bin,
		CleanExit: true,
		Config: func(d string) string {
			tokens := filepath.Join(d, "tokens")
			if err := os.WriteFile(tokens, []byte(token+" 1000\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return testenv.ServeConfig(d, "root", testenv.Rootfs(t).Root) + config +
				"listen: tcp://" + addr + "\nauth:\n  tokens_file: " + tokens + "\n"
		},
	})
	tlsEnv := startTLSServe(t, bin)
	// Each file sees only its own service's variables.
	envs := map[string][]string{
		"unix.test.mjs": {"JAILCELL_SOCKET=" + svc.Sock},
		"tcp.test.mjs":  {"JAILCELL_URL=http://" + addr, "JAILCELL_TOKEN=" + token},
		"json.test.mjs": {"JAILCELL_JSON_COMMAND=" + jsonCommand(t, bin)},
		"tls.test.mjs":  tlsEnv,
	}
	// One node per transport, all at once (node 18's runner has no
	// file concurrency flag): most of each test is waiting on a kernel.
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
			cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=tap", "test/"+file)
			cmd.Dir = dir
			home, err := os.MkdirTemp(dir, "home")
			if err != nil {
				done <- outcome{file, err, ""}
				return
			}
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home}, envs[file]...)
			cmd.Env = append(cmd.Env, testenv.HermeticEnv()...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err = cmd.Run()
			done <- outcome{file, err, out.String()}
		}()
	}
	example(t, dir, []string{"JAILCELL_SOCKET=" + svc.Sock})
	for range testFiles {
		o := <-done
		if o.err != nil {
			t.Errorf("node --test test/%s: %v\n%s", o.file, o.err, o.tap)
			continue
		}
		// Every test ran and passed: none skipped, none left as todo.
		counts := map[string]int{}
		for _, m := range regexp.MustCompile(`(?m)^# (tests|pass|fail|skipped|todo|cancelled) (\d+)$`).FindAllStringSubmatch(o.tap, -1) {
			counts[m[1]], _ = strconv.Atoi(m[2])
		}
		if want := testFiles[o.file]; counts["fail"] != 0 || counts["skipped"] != 0 || counts["todo"] != 0 || counts["cancelled"] != 0 || counts["pass"] < want {
			t.Errorf("node --test test/%s: %v; want every one of at least %d tests to pass, none skipped\n%s", o.file, counts, want, o.tap)
			continue
		}
		t.Logf("node --test test/%s: %v\n%s", o.file, counts, durations(o.tap))
	}
}

// example runs example.mjs (E2B's docs' style, only the import changed)
// from a project that has the package installed as @jailcell/client (a
// symlink to the built one, as npm install of a directory makes), against
// the service's socket: its output, and the chart it wrote.
func example(t *testing.T, pkgDir string, env []string) {
	t.Helper()
	proj := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proj, "node_modules", "@jailcell"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pkgDir, filepath.Join(proj, "node_modules", "@jailcell", "client")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(pkgDir, "example.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "example.mjs"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, proj, env, "node", "example.mjs")
	if want := "2\nplotting\nchart.png written\nhello\n"; out != want {
		t.Errorf("node example.mjs printed %q, want %q", out, want)
	}
	png, err := os.ReadFile(filepath.Join(proj, "chart.png"))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("example.mjs's chart.png is not a PNG (%d bytes, %v)", len(png), err)
	}
}

// testFiles are the package's test files, each with how many tests it
// has at least: the 18 cases every transport runs, and its own.
var testFiles = map[string]int{
	"unit.test.mjs": 3, // no service: the transports' own behaviour
	"unix.test.mjs": 18 + 6,
	"tcp.test.mjs":  18 + 2,
	"json.test.mjs": 18 + 4,
	"tls.test.mjs":  18 + 2,
}

// startTLSServe starts a second service whose TCP listener takes mutual
// TLS (tokens and client certificates are exclusive): a test CA, a server
// certificate for 127.0.0.1, a client certificate whose common name is
// the owner uid. It returns tls.test.mjs's environment: the URL and the
// CA, client certificate and key files.
func startTLSServe(t *testing.T, bin string) []string {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCert(t, "jailcell tsclient test ca", nil, nil, true)
	srvCert, srvKey := newCert(t, "127.0.0.1", ca, caKey, false)
	cliCert, cliKey := newCert(t, "1000", ca, caKey, false)
	files := map[string][]byte{
		"ca.pem":  pemBlock("CERTIFICATE", ca.Raw),
		"srv.pem": pemBlock("CERTIFICATE", srvCert.Raw), "srv.key": pemKey(t, srvKey),
		"cli.pem": pemBlock("CERTIFICATE", cliCert.Raw), "cli.key": pemKey(t, cliKey),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	testenv.StartServe(t, testenv.Serve{
		Bin:       bin,
		CleanExit: true,
		Config: func(d string) string {
			return testenv.ServeConfig(d, "root", testenv.Rootfs(t).Root) + config + "listen: tcp://" + addr +
				"\ntls:\n  cert: " + filepath.Join(dir, "srv.pem") + "\n  key: " + filepath.Join(dir, "srv.key") +
				"\n  client_ca: " + filepath.Join(dir, "ca.pem") + "\n"
		},
	})
	return []string{"JAILCELL_TLS_URL=https://" + addr, "JAILCELL_TLS_CA=" + filepath.Join(dir, "ca.pem"),
		"JAILCELL_TLS_CERT=" + filepath.Join(dir, "cli.pem"), "JAILCELL_TLS_KEY=" + filepath.Join(dir, "cli.key")}
}

// newCert makes a certificate for cn (an IP also as its address), signed
// by parent (nil: self-signed).
func newCert(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        isCA, BasicConstraintsValid: true}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func pemKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock("PRIVATE KEY", der)
}

// durations lists each test of a TAP report with its time, one a line.
func durations(tap string) string {
	var b strings.Builder
	name := ""
	for _, l := range strings.Split(tap, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "not ok ") {
			name = l
		} else if ms, ok := strings.CutPrefix(l, "duration_ms: "); ok && name != "" {
			fmt.Fprintf(&b, "%10s ms  %s\n", ms, name)
			name = ""
		}
	}
	return b.String()
}

// config is the service's: small limits, the default policy's cells
// interrupted quickly on a timeout; no preload and no template
// checkpoint, so the first create is not a cold start of numpy, pandas
// and matplotlib (the figure case imports matplotlib itself).
const config = `log:
  level: info
sessions:
  max: 12
  template: false
preload: []
drain_grace: 20s
policies:
  default:
    memory_bytes: 512MiB
    pids: 64
    disk_bytes: 64MiB
    interrupt_grace: 2s
`

// jsonCommand is the command line (a JSON array) that starts a test
// `jailcell json`: its own configuration, and a fresh state directory for
// each process (one jailcell per state directory).
func jsonCommand(t *testing.T, bin string) string {
	t.Helper()
	dir := testenv.StateDir(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(testenv.ServeConfig(dir, "root", testenv.Rootfs(t).Root)+config), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal([]string{"env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "JAILCELL_REVIEW_DIR=" + dir + "/review",
		"JAILCELL_CONFIG=" + testenv.HermeticConfig(),
		"sh", "-c", `exec "$0" json --config "$1" --state-dir "$(mktemp -d "$2/s.XXXXXX")"`, bin, cfg, dir})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
