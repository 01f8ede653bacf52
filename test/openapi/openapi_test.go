package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const doc = "../../api/openapi.json"

// tools installs (once) and returns the directory holding node_modules.
func tools(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("requires node: not available on this host (%v); make deps installs it", err)
	}
	out, err := exec.Command("../../scripts/fetch-openapi-tools.sh").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("install the OpenAPI tools: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// run runs one of the installed tools in dir; it returns the exit code
// and the combined output.
func run(t *testing.T, modules, dir, tool string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(modules, "node_modules", ".bin", tool), args...)
	cmd.Dir = dir
	home := t.TempDir()
	// Nothing may leave the machine (Redocly's usage report and update
	// check are off) and nothing is written outside the test's own dirs.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home, "NO_COLOR=1",
		"REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "REDOCLY_SUPPRESS_NOTIFICATIONS=true"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, out.String())
	}
	return 0, out.String()
}

type lintReport struct {
	Totals struct {
		Errors   int `json:"errors"`
		Warnings int `json:"warnings"`
		Ignored  int `json:"ignored"`
	} `json:"totals"`
	Problems []struct {
		RuleID   string `json:"ruleId"`
		Severity string `json:"severity"`
		Message  string `json:"message"`
		Location []struct {
			Pointer string `json:"pointer"`
		} `json:"location"`
	} `json:"problems"`
}

// lint runs redocly lint with this directory's redocly.yaml on file.
func lint(t *testing.T, modules, file string) (int, lintReport, string) {
	t.Helper()
	wd, _ := os.Getwd()
	code, out := run(t, modules, wd, "redocly", "lint", "--config", "redocly.yaml", "--format", "json", file)
	var r lintReport
	// The JSON report is the output's one object; notices may precede it.
	if i := strings.Index(out, "{"); i < 0 || json.NewDecoder(strings.NewReader(out[i:])).Decode(&r) != nil {
		t.Fatalf("redocly lint %s printed no JSON report (exit %d):\n%s", file, code, out)
	}
	return code, r, out
}

// TestOpenAPILintRecommended: the document has no error and no warning
// under Redocly's recommended rules; the only findings accepted are the
// ones listed in .redocly.lint-ignore.yaml, each with its reason, and that
// list holds no stale entry.
func TestOpenAPILintRecommended(t *testing.T) {
	modules := tools(t)
	code, r, out := lint(t, modules, doc)
	for _, p := range r.Problems {
		ptr := ""
		if len(p.Location) > 0 {
			ptr = p.Location[0].Pointer
		}
		t.Errorf("%s %s at %s: %s", p.Severity, p.RuleID, ptr, p.Message)
	}
	if code != 0 || r.Totals.Errors != 0 || r.Totals.Warnings != 0 {
		t.Errorf("redocly lint: exit %d, %d errors, %d warnings; want 0, 0, 0\n%s", code, r.Totals.Errors, r.Totals.Warnings, out)
	}
	ignore, err := os.ReadFile(".redocly.lint-ignore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	entries := 0
	for _, l := range strings.Split(string(ignore), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "- '#/") {
			entries++
		}
	}
	if r.Totals.Ignored != entries {
		t.Errorf("redocly ignored %d findings, .redocly.lint-ignore.yaml lists %d: remove an entry whose finding is gone", r.Totals.Ignored, entries)
	}
}

// TestOpenAPILintCatches: the same lint fails a copy of the document
// without its security schemes and servers, so a passing lint is the
// rules at work and not a configuration that checks nothing.
func TestOpenAPILintCatches(t *testing.T) {
	modules := tools(t)
	d := readDoc(t)
	delete(d["components"].(map[string]any), "securitySchemes")
	delete(d, "servers")
	delete(d, "security")
	file := writeDoc(t, t.TempDir(), d)
	code, r, _ := lint(t, modules, file)
	rules := map[string]int{}
	for _, p := range r.Problems {
		rules[p.RuleID]++
	}
	if code == 0 || rules["security-defined"] == 0 || rules["no-empty-servers"] == 0 {
		t.Errorf("lint of a document without security and servers: exit %d, findings %v; want security-defined and no-empty-servers errors", code, rules)
	}
}

func readDoc(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return d
}

func writeDoc(t *testing.T, dir string, d map[string]any) string {
	t.Helper()
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// compile generates the types of the document at file into a temporary
// directory and compiles client.ts against them with tsc --strict.
func compile(t *testing.T, modules, file string) (int, string) {
	t.Helper()
	dir := t.TempDir()
	if code, out := run(t, modules, dir, "openapi-typescript", file, "-o", filepath.Join(dir, "schema.d.ts")); code != 0 {
		t.Fatalf("openapi-typescript %s: exit %d\n%s", file, code, out)
	}
	src, err := os.ReadFile("client.ts")
	if err != nil {
		t.Fatal(err)
	}
	// ES2022 with no DOM or node types: the client uses the generated
	// types and the language, nothing else.
	tsconfig := `{"compilerOptions": {"strict": true, "noEmit": true, "noUnusedLocals": true, "target": "es2022",
  "module": "nodenext", "moduleResolution": "nodenext", "lib": ["es2022"], "types": []}, "files": ["client.ts"]}`
	for name, b := range map[string][]byte{"client.ts": src, "tsconfig.json": []byte(tsconfig)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return run(t, modules, dir, "tsc", "-p", "tsconfig.json")
}

// TestOpenAPITypeScriptClient: a TypeScript client written against the
// types generated from the document compiles with tsc --strict: create a
// session, exec answered as JSON and as NDJSON (each line narrowed to an
// event, the result or an error), list, upload and download files, and
// every documented error status typed as an ErrorResponse.
func TestOpenAPITypeScriptClient(t *testing.T) {
	modules := tools(t)
	abs, err := filepath.Abs(doc)
	if err != nil {
		t.Fatal(err)
	}
	if code, out := compile(t, modules, abs); code != 0 {
		t.Errorf("client.ts does not compile against the types generated from api/openapi.json (tsc exit %d):\n%s", code, out)
	}
}

// TestOpenAPITypeScriptClientCatches: the same compile fails when the
// document stops saying what client.ts relies on (here: exec's body
// required, and its streamed line told apart from its result), so a
// passing compile is the types at work.
func TestOpenAPITypeScriptClientCatches(t *testing.T) {
	modules := tools(t)
	for name, mutate := range map[string]func(d map[string]any){
		"exec body optional": func(d map[string]any) {
			op := d["paths"].(map[string]any)["/v1/sessions/{id}/exec"].(map[string]any)["post"].(map[string]any)
			op["requestBody"].(map[string]any)["required"] = false
		},
		"stream line is the result": func(d map[string]any) {
			op := d["paths"].(map[string]any)["/v1/sessions/{id}/exec"].(map[string]any)["post"].(map[string]any)
			content := op["responses"].(map[string]any)["200"].(map[string]any)["content"].(map[string]any)
			content["application/x-ndjson"] = content["application/json"]
		},
	} {
		d := readDoc(t)
		mutate(d)
		if code, out := compile(t, modules, writeDoc(t, t.TempDir(), d)); code == 0 || !strings.Contains(out, "client.ts(") {
			t.Errorf("%s: client.ts still compiles (tsc exit %d): %s", name, code, out)
		}
	}
}
