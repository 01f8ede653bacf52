package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/session"
)

// TestFleetConfigChecks: each fleet key's bad value is refused with an
// error naming the key and what is allowed; TCP without authentication
// is refused outright.
func TestFleetConfigChecks(t *testing.T) {
	hermeticConfig(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	for _, tc := range []struct {
		yaml, want string
	}{
		{"listen: tcp://127.0.0.1:7070\n", "needs authentication"},
		{"listen: 127.0.0.1:7070\nauth:\n  tokens_file: " + tokens + "\n", "want tcp://HOST:PORT"},
		{"listen: tcp://localhost:7070\nauth:\n  tokens_file: " + tokens + "\n", "must be an IP address"},
		{"listen: tcp://127.0.0.1:7070\ntls:\n  cert: /x.pem\n", "set both"},
		{"auth:\n  tokens_file: " + tokens + "\ntls:\n  cert: /c\n  key: /k\n  client_ca: /ca\n", "choose one"},
		{"auth:\n  tokens_file: tokens\n", "auth.tokens_file"},
		{"node:\n  id: Node_1\n", "node.id"},
		{"node:\n  id: abcdefghijklmnopq\n", "node.id"},
		{"sandbox:\n  uid_base: 1073741825\n", "multiple of 65536"},
		{"sandbox:\n  uid_base: 1000\n", "sandbox.uid_base"},
		{"sandbox:\n  cgroup_root: jailcell\n", "sandbox.cgroup_root"},
		{"sandbox:\n  cgroup_root: /a/../b\n", "sandbox.cgroup_root"},
		{"e2b:\n  listen: tcp://127.0.0.1:7071\n", "needs auth.tokens_file"},
		{"e2b:\n  listen: 127.0.0.1:7071\nauth:\n  tokens_file: " + tokens + "\n", "e2b.listen"},
		{"e2b:\n  domain: Not_A_Domain\n", "e2b.domain"},
		{"e2b:\n  templates: [base]\n", "want NAME=POLICY"},
		{"e2b:\n  templates: [base=nosuch]\n", `no policy "nosuch"`},
	} {
		_, err := runConfigCmd(t, "--config", writeConfig(t, tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
	out, err := runConfigCmd(t, "--config", writeConfig(t, "listen: tcp://127.0.0.1:7070\nauth:\n  tokens_file: "+tokens+
		"\nnode:\n  id: n2\nsandbox:\n  uid_base: 1342177280\n  cgroup_root: /jailcell-n2\n"))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"listen": "tcp://127.0.0.1:7070", "node.id": "n2", "sandbox.uid_base": "1342177280", "sandbox.cgroup_root": "/jailcell-n2"} {
		if v, _ := settingOf(t, out, key); v != want {
			t.Errorf("%s = %s, want %s", key, v, want)
		}
	}
}

func TestNodeFromHostname(t *testing.T) {
	for h, want := range map[string]string{
		"web-01.example.com":           "web01examplecom",
		"Build-Box-7":                  "buildbox7",
		"a-very-long-host-name-indeed": "averylonghostnam",
		"---":                          "node",
		"":                             "node",
	} {
		if got := session.NodeFromHostname(h); got != want {
			t.Errorf("nodeFromHostname(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestReadTokens: the tokens file is refused when others could read it,
// and each bad line is named by number without echoing a token.
func TestReadTokens(t *testing.T) {
	dir := t.TempDir()
	tok := strings.Repeat("k", 40)
	write := func(body string, mode os.FileMode) string {
		p := filepath.Join(dir, "tokens")
		os.Remove(p)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := readTokens(write("# fleet\n"+tok+" 1000\n\n"+strings.Repeat("r", 32)+" root # the proxy's operator\n", 0o600))
	if err != nil || len(got) != 2 || got[tok] != 1000 || got[strings.Repeat("r", 32)] != 0 {
		t.Fatalf("good file: %v %v", got, err)
	}
	for _, tc := range []struct {
		body string
		mode os.FileMode
		want string
	}{
		{tok + " 1000\n", 0o640, "lets others read or change it"},
		{tok + " 1000\n", 0o604, "lets others read or change it"},
		{"short 1000\n", 0o600, "line 1: a token must be"},
		{tok + "\n", 0o600, "line 1: want TOKEN OWNER"},
		{"# nothing\n", 0o600, "no tokens"},
		{tok + " 1000\n" + tok + " 1001\n", 0o600, "line 2: a token listed twice"},
		{tok + " no-such-user-here\n", 0o600, "owner"},
		{"1000 " + tok + "\n", 0o600, "line 1: a token must be"},
		{strings.Repeat("q", 40) + " " + tok + "\n", 0o600, "line 1: the owner"},
	} {
		_, err := readTokens(write(tc.body, tc.mode))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tok) {
			t.Errorf("%q mode %o: got %v, want an error containing %q and not the token", tc.body, tc.mode, err, tc.want)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "tokens"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := readTokens(filepath.Join(dir, "link")); err == nil {
		t.Error("a symlinked tokens file was followed")
	}
}

// FuzzParseTokens: any tokens file either parses into tokens that each
// meet the token rule, or is refused with an error that never contains a
// token-shaped field of the input.
func FuzzParseTokens(f *testing.F) {
	tok := strings.Repeat("k", 40)
	for _, seed := range []string{"", tok + " 1000\n", tok + " " + tok + "\n", "# c\n" + tok + " 0 # x\n", tok + "\n", "a b c\n", tok + " 1000\n" + tok + " 1\n", "\x00\xff " + tok + "\n"} {
		f.Add([]byte(seed))
	}
	lookup := func(s string) (uint32, error) { return lookupUser(s) }
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseTokens("/f", b, lookup)
		if err != nil {
			for _, field := range strings.Fields(string(b)) {
				if tokenRE.MatchString(field) && strings.Contains(err.Error(), field) {
					t.Fatalf("error echoes a token: %v", err)
				}
			}
			return
		}
		for k := range got {
			if !tokenRE.MatchString(k) {
				t.Fatalf("accepted token %q", k)
			}
		}
	})
}

func TestJoinConnectValue(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"mcp", "--connect", "/run/jailcell/jailcell.sock"}, []string{"mcp", "--connect=/run/jailcell/jailcell.sock"}},
		{[]string{"mcp", "--connect"}, []string{"mcp", "--connect"}},
		{[]string{"run", "--connect", "cell.py"}, []string{"run", "--connect", "cell.py"}},
		{[]string{"json", "--connect", "--policy", "x"}, []string{"json", "--connect", "--policy", "x"}},
		{[]string{"run", "--", "--connect", "a.sock"}, []string{"run", "--", "--connect", "a.sock"}},
	} {
		if got := joinConnectValue(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("joinConnectValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
