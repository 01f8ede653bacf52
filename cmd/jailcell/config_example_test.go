package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

var updateExample = flag.Bool("update", false, "rewrite configs/config.example.yaml from configKeys")

const examplePath = "../../configs/config.example.yaml"

// exampleConfig renders configs/config.example.yaml from configKeys: each
// key with its doc as a comment and its default as the value, dotted
// names as nested sections; then the policies, which have their own
// schema (policy.Policy).
func exampleConfig() []byte {
	var b bytes.Buffer
	var reload []string
	for _, k := range configKeys {
		if k.reload {
			reload = append(reload, k.name)
		}
	}
	fmt.Fprintf(&b, exampleHeader, strings.Join(reload[:len(reload)-1], ", ")+" and "+reload[len(reload)-1])
	var prev []string
	for _, k := range configKeys {
		parts := strings.Split(k.name, ".")
		sections, leaf := parts[:len(parts)-1], parts[len(parts)-1]
		same := 0
		for same < len(sections) && same < len(prev) && sections[same] == prev[same] {
			same++
		}
		if same == 0 {
			b.WriteString("\n")
		}
		for d := same; d < len(sections); d++ {
			fmt.Fprintf(&b, "%s%s:\n", strings.Repeat("  ", d), sections[d])
		}
		indent := strings.Repeat("  ", len(sections))
		for _, line := range strings.Split(k.doc, "\n") {
			fmt.Fprintf(&b, "%s# %s\n", indent, line)
		}
		fmt.Fprintf(&b, "%s%s: %s\n", indent, leaf, yamlValue(k.def))
		prev = sections
	}
	b.WriteString(examplePolicies)
	return b.Bytes()
}

// yamlValue writes a default the way an operator would type it.
func yamlValue(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" || strings.ContainsAny(x, ":#{}[],&*!|>'\"%@`") {
			return strconv.Quote(x)
		}
		return x
	case []string:
		return "[" + strings.Join(x, ", ") + "]"
	case time.Duration:
		s := x.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	}
	return fmt.Sprint(v)
}

const exampleHeader = `# jailcell configuration: /etc/jailcell/config.yaml (or --config PATH, or
# JAILCELL_CONFIG). Every key is shown with its default; this file as
# shipped changes nothing. Generated from configKeys (cmd/jailcell/config_keys.go):
# go test ./cmd/jailcell -run TestConfigExampleGenerated -update
#
# Precedence, lowest to highest: defaults, this file, JAILCELL_* environment
# variables (key "a.b" is JAILCELL_A_B; lists are comma-separated), flags.
# ` + "`jailcell config`" + ` prints the effective value of every key and its source.
# An unknown key or a bad value stops jailcell at start, naming the key,
# the value and what is allowed. SIGHUP makes ` + "`jailcell serve`" + ` re-read
# %s; other keys need a restart.
`

const examplePolicies = `
# Named policies, chosen per session or one-shot exec with "policy": NAME.
# "default" serves requests that name none. A policy starts from the
# built-in defaults below; set only what differs. Sizes take a unit
# (512MiB, 1GiB) or a number of bytes; durations a unit (90s, 10m).
policies:
  default:
    # Memory cgroup limit (RAM plus tmpfs pages; no swap).
    memory_bytes: 1GiB
    # Tasks (processes and threads) at most.
    pids: 128
    # CPU bandwidth in cores.
    cpus: 1
    # What the sandbox can write to its root and workspace.
    disk_bytes: 512MiB
    # Files the sandbox can create.
    disk_inodes: 65536
    # Size of /tmp (a separate tmpfs).
    tmp_bytes: 64MiB
    # RLIMIT_NOFILE inside the sandbox.
    open_files: 1024
    # A cell's wall-clock timeout when the request names none.
    timeout: 60s
    # The ceiling a request's timeout_s is clamped to.
    max_timeout: 10m
    # Time a timed-out cell has to stop after KeyboardInterrupt before its
    # sandbox is killed.
    interrupt_grace: 2s
    # Captured stdout and stderr per cell, each; the rest is dropped and
    # the result marked truncated.
    output_bytes: 1MiB
    # Content of files handed back from a one-shot cell, in total.
    return_file_bytes: 16MiB
    # Network: "none" (loopback only) is the only mode.
    network: none
    # With network "allowlist": the destinations a sandbox may reach, each
    # {host: name or "*.suffix" | ip | cidr, ports: [..]} (docs/egress.md).
    allow: []
    # Errno of a refused system call: EPERM or ENOSYS.
    seccomp_errno: EPERM
    # Fallback when a cell cannot be made to work: "" (none) or
    # "stateless" (run it once more in a fresh one-shot sandbox under this
    # policy with standard-library-only Python, marked "degraded").
    degraded: ""
  # A stricter policy for untrusted snippets:
  # small:
  #   memory_bytes: 256MiB
  #   pids: 32
  #   cpus: 0.5
  #   timeout: 10s
  #   max_timeout: 30s
`

// The example file is what configKeys renders: a key added to the table
// and not to the file (or the reverse) fails here; -update rewrites it.
func TestConfigExampleGenerated(t *testing.T) {
	want := exampleConfig()
	if *updateExample {
		if err := os.WriteFile(examplePath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what configKeys renders; run: go test ./cmd/jailcell -run TestConfigExampleGenerated -update", filepath.Clean(examplePath))
	}
}

// Every row of the table is complete: a unique name, a doc, a decoder,
// and a flag that some command really has.
func TestConfigKeysComplete(t *testing.T) {
	flags := pflag.NewFlagSet("all", pflag.ContinueOnError)
	for _, c := range []interface{ Flags() *pflag.FlagSet }{newServeCmd(), newReviewCmd(), newConfigCmd()} {
		flags.AddFlagSet(c.Flags())
	}
	for _, c := range []interface {
		PersistentFlags() *pflag.FlagSet
	}{newServeCmd(), newReviewCmd()} {
		flags.AddFlagSet(c.PersistentFlags())
	}
	seen := map[string]bool{}
	for _, k := range configKeys {
		if seen[k.name] {
			t.Errorf("%s: listed twice", k.name)
		}
		seen[k.name] = true
		if strings.TrimSpace(k.doc) == "" || k.dec == nil {
			t.Errorf("%s: want a doc and a decoder", k.name)
		}
		if k.flag != "" && flags.Lookup(k.flag) == nil {
			t.Errorf("%s: flag --%s is on no command", k.name, k.flag)
		}
	}
	for _, want := range []string{"log.level", "allowed_uids", "allowed_gids"} {
		if !reloadable(want) {
			t.Errorf("%s is no longer reloadable", want)
		}
	}
	if reloadable("socket") || reloadable("no.such.key") {
		t.Error("socket or an unknown key is reloadable")
	}
}
