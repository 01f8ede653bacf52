package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session"
	"github.com/jailcell/jailcell/workflow"
)

// hermeticConfig clears every JAILCELL_* variable the loader reads, so the
// developer's environment cannot leak into a test.
func hermeticConfig(t testing.TB) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, envPrefix+"_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runConfigCmd runs `jailcell config ARGS` in-process.
func runConfigCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCmd(newConfigCmd(), args...)
}

// runCmd runs a command in-process and returns what it printed.
func runCmd(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// settingOf finds a key's line in `jailcell config` output.
func settingOf(t *testing.T, out, key string) (value, source string) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `\s+(.+?)\s{2,}(\S.*)$`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("key %s not in output:\n%s", key, out)
	}
	return m[1], m[2]
}

func TestConfigDefaults(t *testing.T) {
	hermeticConfig(t)
	out, err := runConfigCmd(t, "--config", writeConfig(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"socket":                        defaultSocket,
		"socket_group":                  "jailcell",
		"state_dir":                     defaultStateDir,
		"log.level":                     "info",
		"sessions.max":                  autoMax(),
		"sessions.idle_ttl":             "30m0s",
		"drain_grace":                   "30s",
		"policies.default.memory_bytes": "1073741824 (1GiB)",
		"policies.default.timeout":      "1m0s",
		"store.url":                     "file:///var/lib/jailcell/store",
		"store.shared":                  "false",
	} {
		v, src := settingOf(t, out, key)
		if v != want || src != "default" {
			t.Errorf("%s = %q from %q, want %q from default", key, v, src, want)
		}
	}
}

// autoMax is what sessions.max "auto" gives on this machine, with the
// bound that decided it: a fresh install sizes it from the host.
func autoMax() string {
	n, why := session.AutoMaxSessions(session.ReadHostCapacity(0), true, policy.Default().Pids)
	return fmt.Sprintf("%d (auto: %s)", n, why)
}

func TestConfigPrecedence(t *testing.T) {
	hermeticConfig(t)
	path := writeConfig(t, `
log:
  level: warn
  format: json
sessions:
  max: 10
  idle_ttl: 5m
state_dir: /srv/jc-file
policies:
  small:
    memory_bytes: 128MiB
    timeout: 5s
`)
	t.Setenv("JAILCELL_SESSIONS_MAX", "20")               // env over file
	t.Setenv("JAILCELL_LOG_LEVEL", "error")               // flag over env
	t.Setenv("JAILCELL_ALLOWED_UIDS", "1000, 1001,alice") // list from env
	t.Setenv("JAILCELL_POLICIES_SMALL_PIDS", "32")        // a policy field from env
	t.Setenv("JAILCELL_STORE_DIR", "")                    // empty is unset
	out, err := runConfigCmd(t, "--config", path, "--log-level", "debug", "--socket", "/tmp/x.sock")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ key, value, source string }{
		{"log.level", "debug", "flag --log-level"},
		{"log.format", "json", "file " + path},
		{"sessions.max", "20", "env JAILCELL_SESSIONS_MAX"},
		{"sessions.idle_ttl", "5m0s", "file " + path},
		{"sessions.max_lifetime", "24h0m0s", "default"},
		{"state_dir", "/srv/jc-file", "file " + path},
		{"store_dir", "", "default"},
		{"socket", "/tmp/x.sock", "flag --socket"},
		{"allowed_uids", "[1000, 1001, alice]", "env JAILCELL_ALLOWED_UIDS"},
		{"policies.small.memory_bytes", "134217728 (128MiB)", "file " + path},
		{"policies.small.timeout", "5s", "file " + path},
		{"policies.small.pids", "32", "env JAILCELL_POLICIES_SMALL_PIDS"},
		{"policies.small.cpus", "1", "default"},
	} {
		v, src := settingOf(t, out, tc.key)
		if tc.value == "" {
			tc.value = `""`
		}
		if v != tc.value || src != tc.source {
			t.Errorf("%s = %q from %q, want %q from %q", tc.key, v, src, tc.value, tc.source)
		}
	}

	cfg, err := loadConfig(nil)
	if err == nil && cfg.Policies["small"].Name != "" {
		t.Errorf("loadConfig without --config read %s", path)
	}
}

func TestConfigPolicies(t *testing.T) {
	hermeticConfig(t)
	t.Setenv("JAILCELL_CONFIG", writeConfig(t, `
policies:
  default:
    memory_bytes: 512MiB
  strict:
    memory_bytes: 64m
    cpus: 0.5
    pids: 16
    max_timeout: 1m
    timeout: 10s
    open_files: 256
    seccomp_errno: ENOSYS
`))
	cfg, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Default()
	want.MemoryBytes = 512 << 20
	if got := cfg.Policies["default"]; got != want {
		t.Errorf("default policy %+v, want %+v", got, want)
	}
	s := cfg.Policies["strict"]
	if s.Name != "strict" || s.MemoryBytes != 64<<20 || s.CPUs != 0.5 || s.Pids != 16 || s.MaxTimeout != time.Minute ||
		s.Timeout != 10*time.Second || s.OpenFiles != 256 || s.SeccompErrno != "ENOSYS" || s.DiskBytes != policy.Default().DiskBytes {
		t.Errorf("strict policy %+v", s)
	}
}

// Invalid configuration names the key, the value and what is allowed.
func TestConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       []string
	}{
		{"unknown key", "sesions:\n  max: 3\n", nil, []string{"sesions.max: unknown key", "sessions.max"}},
		{"unknown policy field", "policies:\n  small:\n    memory: 1\n", nil, []string{"policies.small.memory: not a policy field", "memory_bytes"}},
		{"bad policy name", "policies:\n  Big-One:\n    pids: 8\n", nil, []string{"policy name", "[a-z0-9_]"}},
		{"policy out of range", "policies:\n  small:\n    memory_bytes: 1MiB\n", nil, []string{"policies.small.memory_bytes = 1048576, allowed 33554432.."}},
		{"policy timeout above max", "policies:\n  default:\n    timeout: 1h\n", nil, []string{"policies.default.timeout = 1h0m0s, allowed"}},
		{"policy bad size", "policies:\n  default:\n    disk_bytes: lots\n", nil, []string{`policies.default.disk_bytes = "lots"`, "number of bytes"}},
		{"duration without unit", "drain_grace: 30\n", nil, []string{"drain_grace = 30", "duration with a unit"}},
		{"drain grace too long", "drain_grace: 2h\n", nil, []string{"drain_grace = 2h0m0s", "allowed 0s..1h0m0s"}},
		{"sessions.max range", "sessions:\n  max: 0\n", nil, []string{"sessions.max = 0", "allowed 1..4096"}},
		{"sessions.max type", "", map[string]string{"JAILCELL_SESSIONS_MAX": "many"}, []string{`sessions.max = "many" (from env JAILCELL_SESSIONS_MAX)`, `want "auto" or a number of sessions (1..4096)`}},
		{"idle above max idle", "sessions:\n  idle_ttl: 48h\n", nil, []string{"sessions.idle_ttl = 48h0m0s", "allowed 1s..24h0m0s"}},
		{"log level", "log:\n  level: loud\n", nil, []string{`log.level = "loud"`, "debug, info, warn or error"}},
		{"log format", "log:\n  format: xml\n", nil, []string{`log.format = "xml"`, "text or json"}},
		{"relative state dir", "state_dir: state\n", nil, []string{`state_dir = "state"`, "absolute path"}},
		{"socket too long", "socket: /" + strings.Repeat("s", 120) + "\n", nil, []string{"socket = ", "107 bytes"}},
		{"preload", "preload: [numpy, 'os; rm']\n", nil, []string{`preload = "os; rm"`, "module names"}},
		{"list type", "allowed_uids: {a: 1}\n", nil, []string{"allowed_uids", "want a list"}},
		{"negative uid", "allowed_uids: [-1]\n", nil, []string{"allowed_uids = -1", "0..4294967294"}},
		{"not yaml", "socket: [\n", nil, []string{"config file"}},
		{"store_dir and store.url", "store_dir: /srv/a\nstore:\n  url: file:///srv/b\n", nil, []string{`store_dir = "/srv/a" and store.url = "file:///srv/b"`, "set only store.url"}},
		{"relative store_dir", "store_dir: store\n", nil, []string{`store_dir = "store"`, "absolute path"}},
		{"store scheme", "store:\n  url: ftp://x/y\n", nil, []string{`store.url = "ftp://x/y"`, "s3://BUCKET/PREFIX"}},
		{"s3 without endpoint", "store:\n  url: s3://bucket/p\n", nil, []string{`store.url = "s3://bucket/p" needs store.s3.endpoint`}},
		{"store timeout", "store:\n  timeout: 2h\n", nil, []string{"store.timeout = 2h0m0s", "allowed 1s..1h0m0s"}},
		// Store attack: a shared store is never trusted unsigned.
		{"s3 without key_file", "store:\n  url: s3://bucket/p\n  s3:\n    endpoint: http://127.0.0.1:1\n", nil, []string{`store.url = "s3://bucket/p" is a shared store`, "store.key_file"}},
		{"shared file store without key_file", "store:\n  url: file:///srv/s\n  shared: true\n", nil, []string{`store.url = "file:///srv/s" is a shared store`, "store.key_file"}},
		{"relative key_file", "store:\n  url: s3://bucket/p\n  key_file: keys\n  s3:\n    endpoint: http://127.0.0.1:1\n", nil, []string{`store.key_file = "keys"`, "absolute path"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hermeticConfig(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := runConfigCmd(t, "--config", writeConfig(t, tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	t.Run("missing file asked for", func(t *testing.T) {
		hermeticConfig(t)
		if _, err := runConfigCmd(t, "--config", "/nonexistent/jailcell.yaml"); err == nil || !strings.Contains(err.Error(), "/nonexistent/jailcell.yaml") {
			t.Fatalf("error %v, want one naming the file", err)
		}
	})
}

// The shipped example documents every key with its default: loading it
// changes nothing, and no key or policy field is missing from it.
func TestConfigExample(t *testing.T) {
	hermeticConfig(t)
	example := filepath.Join("..", "..", "configs", "config.example.yaml")
	b, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	withFile, err := runConfigCmd(t, "--config", example)
	if err != nil {
		t.Fatal(err)
	}
	without, err := runConfigCmd(t, "--config", writeConfig(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	values := func(out string) map[string]string {
		m := map[string]string{}
		re := regexp.MustCompile(`(?m)^(\S+)\s+(.+?)\s{2,}(\S.*)$`)
		for _, sm := range re.FindAllStringSubmatch(out, -1) {
			if sm[1] != "KEY" {
				m[sm[1]] = sm[2]
			}
		}
		return m
	}
	a, d := values(withFile), values(without)
	if len(d) < len(configKeys)+len(policyFields) {
		t.Fatalf("parsed %d settings, want at least %d", len(d), len(configKeys)+len(policyFields))
	}
	for k, v := range d {
		if a[k] != v {
			t.Errorf("example sets %s = %q, the default is %q", k, a[k], v)
		}
		if _, src := settingOf(t, withFile, k); !strings.HasPrefix(src, "file") {
			t.Errorf("example does not set %s (source %s): document it with its default", k, src)
		}
	}
	if !bytes.Contains(b, []byte("# small:")) {
		t.Error("example lost its named-policy sample")
	}
}

// The workflow keys come through the same file, env and default layers as
// every other key, and reach the workflow configuration.
func TestWorkflowKeysFromConfig(t *testing.T) {
	hermeticConfig(t)
	path := writeConfig(t, "fixer:\n  command: /usr/bin/python3 fix.py\n  max_attempts_ceiling: 7\nfailures:\n  ttl: 2h\n")
	out, err := runConfigCmd(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	if v, src := settingOf(t, out, "fixer.command"); v != "/usr/bin/python3 fix.py" || !strings.HasPrefix(src, "file") {
		t.Fatalf("fixer.command = %q from %s", v, src)
	}
	if _, err := runConfigCmd(t, "--config", writeConfig(t, "fixer:\n  max_attempts_ceiling: 100\n")); err == nil || !strings.Contains(err.Error(), "fixer.max_attempts_ceiling") {
		t.Fatalf("out-of-range ceiling: %v", err)
	}
	t.Setenv("JAILCELL_FIXER_MAX_ATTEMPTS_CEILING", "9") // env beats the file
	t.Setenv("JAILCELL_CONFIG", path)
	cfg, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	wc := cfg.Workflow
	if wc.MaxAttemptsCeiling != 9 || wc.TTL.Hours() != 2 || wc.Fixer == nil {
		t.Fatalf("workflow config: ceiling %d ttl %s fixer %v", wc.MaxAttemptsCeiling, wc.TTL, wc.Fixer)
	}
}

func TestPolicyAllowlistFromConfig(t *testing.T) {
	hermeticConfig(t)
	good := "egress_upstream: /run/netns/egress\npolicies:\n  web:\n    network: allowlist\n    allow:\n      - host: pypi.internal\n        ports: [443]\n      - cidr: 10.1.0.0/16\n        ports: [8080]\n"
	t.Setenv("JAILCELL_CONFIG", writeConfig(t, good))
	cfg, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policies["web"]
	if p.Allow == nil || len(*p.Allow) != 2 || (*p.Allow)[0].Host != "pypi.internal" || cfg.EgressUpstream != "/run/netns/egress" {
		t.Fatalf("web policy: %+v upstream %q", p, cfg.EgressUpstream)
	}
	bad := "policies:\n  web:\n    network: allowlist\n    allow:\n      - hots: pypi.internal\n        ports: [443]\n"
	if _, err := runConfigCmd(t, "--config", writeConfig(t, bad)); err == nil || !strings.Contains(err.Error(), "policies.web.allow") {
		t.Fatalf("misspelt allow entry: %v", err)
	}
}

// jailcell review reads review.dir through the configuration like every
// other key: the file, then JAILCELL_REVIEW_DIR, then --review-dir.
func TestReviewDirFromConfig(t *testing.T) {
	hermeticConfig(t)
	dirs := map[string]string{}
	for _, which := range []string{"file", "env", "flag"} {
		d := t.TempDir()
		b, err := json.Marshal(workflow.ReviewEntry{Reason: "from " + which})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, workflow.ReviewFile), append(b, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		dirs[which] = d
	}
	review := func(args ...string) string {
		t.Helper()
		out, err := runCmd(newReviewCmd(), args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	t.Setenv("JAILCELL_CONFIG", writeConfig(t, "review:\n  dir: "+dirs["file"]+"\n"))
	if out := review("list"); !strings.Contains(out, "from file") {
		t.Errorf("review.dir from the file not used:\n%s", out)
	}
	t.Setenv("JAILCELL_REVIEW_DIR", dirs["env"])
	if out := review("list"); !strings.Contains(out, "from env") {
		t.Errorf("JAILCELL_REVIEW_DIR not used:\n%s", out)
	}
	if out := review("--review-dir", dirs["flag"], "list"); !strings.Contains(out, "from flag") {
		t.Errorf("--review-dir not used:\n%s", out)
	}
	t.Setenv("JAILCELL_REVIEW_DIR", "relative")
	if _, err := runCmd(newReviewCmd(), "list"); err == nil || !strings.Contains(err.Error(), "review.dir") {
		t.Errorf("relative review.dir: %v, want an error naming review.dir", err)
	}
}

// The fixer.* keys become one workflow fixer, or an error naming the key.
func TestConfigFixer(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       string // "" loads
		check      func(t *testing.T, w workflow.Config)
	}{
		{"none", "", "", func(t *testing.T, w workflow.Config) {
			if w.Fixer != nil || w.ReviewDir != defaultReviewDir || w.Threshold != 3 || w.TTL != 24*time.Hour || w.MaxAttemptsCeiling != 5 {
				t.Errorf("defaults: %+v", w)
			}
		}},
		{"command", "fixer:\n  command: /bin/fix --fast\n  timeout: 5s\n", "", func(t *testing.T, w workflow.Config) {
			f, ok := w.Fixer.(*workflow.CommandFixer)
			if !ok || f.Path != "/bin/fix" || len(f.Args) != 1 || f.Timeout != 5*time.Second {
				t.Errorf("fixer %#v", w.Fixer)
			}
		}},
		{"openai", "fixer:\n  openai:\n    base_url: http://127.0.0.1:1/v1\n    model: m\n    api_key_env: K\n", "", func(t *testing.T, w workflow.Config) {
			f, ok := w.Fixer.(*workflow.OpenAIFixer)
			if !ok || f.Model != "m" || f.APIKeyEnv != "K" || f.Timeout != time.Minute {
				t.Errorf("fixer %#v", w.Fixer)
			}
		}},
		{"empty review dir is the default", "review:\n  dir: \"\"\n", "", func(t *testing.T, w workflow.Config) {
			if w.ReviewDir != defaultReviewDir {
				t.Errorf("review dir %q", w.ReviewDir)
			}
		}},
		{"bad kind", "fixer:\n  kind: shell\n", `fixer.kind (JAILCELL_FIXER_KIND) = "shell": want command or openai`, nil},
		{"command without program", "fixer:\n  kind: command\n", "fixer.command (JAILCELL_FIXER_COMMAND) is empty", nil},
		{"openai without model", "fixer:\n  kind: openai\n  openai:\n    base_url: http://127.0.0.1:1/v1\n", "fixer.openai.model", nil},
		{"zero timeout", "fixer:\n  timeout: 0s\n", "fixer.timeout = 0s: want a positive duration", nil},
		{"negative ttl", "failures:\n  ttl: -1h\n", "failures.ttl = -1h0m0s: want a positive duration", nil},
		{"threshold range", "failures:\n  threshold: 0\n", "failures.threshold = 0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hermeticConfig(t)
			t.Setenv("JAILCELL_CONFIG", writeConfig(t, tc.yaml))
			cfg, err := loadConfig(nil)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg.Workflow)
		})
	}
}

// SIGHUP takes exactly the keys marked reload in configKeys.
func TestApplyReloadable(t *testing.T) {
	hermeticConfig(t)
	t.Setenv("JAILCELL_CONFIG", writeConfig(t, ""))
	old, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("JAILCELL_CONFIG", writeConfig(t, "log:\n  level: debug\nallowed_uids: [7]\nallowed_gids: [8]\nsocket: /tmp/other.sock\nsessions:\n  max: 3\n"))
	cfg, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	kept := *old
	applyReloadable(&kept, cfg)
	if kept.LogLevel != slog.LevelDebug || len(kept.AllowedUIDs) != 1 || len(kept.AllowedGIDs) != 1 {
		t.Errorf("reloadable keys not applied: %v %v %v", kept.LogLevel, kept.AllowedUIDs, kept.AllowedGIDs)
	}
	if kept.Socket != old.Socket || kept.Session.MaxSessions != old.Session.MaxSessions {
		t.Errorf("a restart-only key was applied: socket %s, sessions.max %d", kept.Socket, kept.Session.MaxSessions)
	}
}
