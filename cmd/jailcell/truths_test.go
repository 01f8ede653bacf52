package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
)

// truthLine is what the end-to-end test reads of each output line.
type truthLine struct {
	ID     string `json:"id"`
	OK     bool   `json:"ok"`
	Event  string `json:"event"`
	Text   string `json:"text"`
	Error  *struct{ Code, Message string }
	Result *struct {
		Status, Stdout, Stderr string
		Error                  *struct {
			Type, Message, Traceback string
			ExitCode                 *int `json:"exit_code"`
		}
	}
	Session string `json:"session"`
}

// TestJSONSmallTruths: through `jailcell json` and a real sandbox, a
// failed %pip and a failed `!cmd` are errors with their exit status,
// output comes without ANSI escapes or "\r\n" unless raw_ansi asks, and
// every not_found names what is missing.
func TestJSONSmallTruths(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	cmd := exec.Command(os.Args[0], "json", "--rootfs", r.Root, "--state-dir", state)
	cmd.Env = jailcellEnv("JAILCELL_REVIEW_DIR=" + state + "/review")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	defer func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("json exited: %v\n%s", err, stderr.String())
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Errorf("json did not exit after stdin closed")
		}
	}()
	n := 0
	// call sends one request and returns its events and its response.
	call := func(req string) ([]truthLine, truthLine) {
		t.Helper()
		n++
		id := fmt.Sprint(n)
		if _, err := io.WriteString(in, strings.Replace(req, "{", `{"id":"`+id+`",`, 1)+"\n"); err != nil {
			t.Fatal(err)
		}
		var events []truthLine
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("output ended\n%s", stderr.String())
				}
				var v truthLine
				if err := json.Unmarshal([]byte(l), &v); err != nil {
					t.Fatalf("line %q: %v", l, err)
				}
				if v.ID != id {
					continue
				}
				if v.Event != "" {
					events = append(events, v)
					continue
				}
				return events, v
			case <-time.After(120 * time.Second):
				t.Fatalf("no answer to %s\n%s", req, stderr.String())
			}
		}
	}

	_, created := call(`{"op":"create"}`)
	if !created.OK || created.Session == "" {
		t.Fatalf("create: %+v", created)
	}
	sid := created.Session
	exec := func(code string, extra string) ([]truthLine, truthLine) {
		b, _ := json.Marshal(code)
		return call(`{"op":"exec","session":"` + sid + `","code":` + string(b) + extra + `}`)
	}

	// 1. Failed shell commands are errors with their exit status.
	_, resp := exec("%pip install nonexistent-package", "")
	if resp.Result == nil || resp.Result.Status != "error" || resp.Result.Error == nil ||
		resp.Result.Error.Type != "subprocess.CalledProcessError" || resp.Result.Error.ExitCode == nil || *resp.Result.Error.ExitCode != 1 {
		t.Fatalf("%%pip install nonexistent-package: %+v", resp.Result)
	}
	pip := resp.Result.Stdout
	if !strings.Contains(pip, "nonexistent-package") || strings.ContainsRune(pip, 0x1b) || strings.Contains(pip, "\r\n") {
		t.Errorf("%%pip stdout (want pip's words, no escapes, no \\r\\n): %q", pip)
	}
	// pip colours its errors on a terminal: raw_ansi shows what was removed.
	_, resp = exec("%pip install nonexistent-package", `,"raw_ansi":true`)
	if raw := resp.Result.Stdout; !strings.Contains(raw, "\x1b[31mERROR") || strings.ReplaceAll(strings.ReplaceAll(raw, "\x1b[31m", ""), "\x1b[0m", "") != pip {
		t.Errorf("%%pip raw stdout %q, want pip's colours around the cleaned text %q", raw, pip)
	}
	for _, tc := range []struct {
		code string
		want int
	}{{"!false", 1}, {"!exit 3", 3}} {
		_, resp := exec(tc.code, "")
		if e := resp.Result.Error; resp.Result.Status != "error" || e == nil || e.ExitCode == nil || *e.ExitCode != tc.want {
			t.Errorf("%s: %+v", tc.code, resp.Result)
		}
	}

	// 2 and 3. The same output, cleaned by default (streamed too), raw
	// on request.
	colour := `print("\x1b[32mgreen\x1b[0m"); import sys; sys.stdout.write("a\r\nb\rc\n")`
	events, resp := exec(colour, `,"stream":true`)
	var streamed strings.Builder
	for _, ev := range events {
		if ev.Event == "stdout" {
			streamed.WriteString(ev.Text)
		}
	}
	if resp.Result.Stdout != "green\na\nb\rc\n" || streamed.String() != resp.Result.Stdout {
		t.Errorf("cleaned: result %q streamed %q, want \"green\\na\\nb\\rc\\n\"", resp.Result.Stdout, streamed.String())
	}
	_, resp = exec(colour, `,"raw_ansi":true`)
	if resp.Result.Stdout != "\x1b[32mgreen\x1b[0m\na\r\nb\rc\n" {
		t.Errorf("raw: %q", resp.Result.Stdout)
	}
	_, resp = exec("!printf 'x\\ny\\n'", "")
	if resp.Result.Stdout != "x\ny\n" {
		t.Errorf("!printf: %q, want \"x\\ny\\n\"", resp.Result.Stdout)
	}
	_, resp = exec("!printf 'x\\ny\\n'", `,"raw_ansi":true`)
	if resp.Result.Stdout != "x\ny\n" {
		t.Errorf("!printf raw: %q, want \"x\\ny\\n\" (the pty adds no \\r)", resp.Result.Stdout)
	}
	_, resp = call(`{"op":"download","session":"` + sid + `","path":"x.txt","raw_ansi":true}`)
	if resp.OK || resp.Error == nil || resp.Error.Code != "bad_request" || !strings.Contains(resp.Error.Message, `"raw_ansi"`) {
		t.Errorf("raw_ansi on download: %+v", resp.Error)
	}

	// 4. not_found names what was not found.
	notFound := func(req string, want ...string) {
		t.Helper()
		_, resp := call(req)
		if resp.OK || resp.Error == nil || resp.Error.Code != "not_found" {
			t.Errorf("%s: %+v, want not_found", req, resp.Error)
			return
		}
		for _, w := range want {
			if !strings.Contains(resp.Error.Message, w) {
				t.Errorf("%s: message %q does not name %q", req, resp.Error.Message, w)
			}
		}
		if strings.Contains(resp.Error.Message, "session not found") {
			t.Errorf("%s: %q", req, resp.Error.Message)
		}
	}
	notFound(`{"op":"download","session":"`+sid+`","path":"missing.txt"}`, "file missing.txt not found", "session "+sid)
	notFound(`{"op":"rollback","session":"`+sid+`"}`, "session "+sid, "no snapshot")
	const ghost = "no-such-session"
	for _, op := range []string{
		`{"op":"exec","session":"` + ghost + `","code":"1"}`,
		`{"op":"download","session":"` + ghost + `","path":"a.txt"}`,
		`{"op":"upload","session":"` + ghost + `","path":"a.txt","data":""}`,
		`{"op":"files","session":"` + ghost + `"}`,
		`{"op":"close","session":"` + ghost + `"}`,
	} {
		notFound(op, `session "`+ghost+`" not found`)
	}
	if _, resp := call(`{"op":"close","session":"` + sid + `"}`); !resp.OK {
		t.Fatalf("close: %+v", resp.Error)
	}
	notFound(`{"op":"files","session":"`+sid+`"}`, "session "+sid, "was closed")
}
