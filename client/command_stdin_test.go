package client

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// commandStdin drives a background command's stdin and terminal through
// c: a pipe fed and closed, a terminal sized, resized and fed, and the
// refusals the client must see as typed errors.
func commandStdin(t *testing.T, c e2bAPI) {
	ctx := context.Background()
	s, err := c.Create(ctx, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseSession(ctx, s.ID)

	cat, err := c.Command(ctx, s.ID, "cat", &CommandOptions{Background: true, Stdin: true})
	if err != nil || cat.Done {
		t.Fatalf("cat with stdin = %+v, %v", cat, err)
	}
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "input", Job: cat.Job, Input: "Hello\n"}); err != nil {
		t.Fatalf("input: %v", err)
	}
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "resize", Job: cat.Job, PTY: &PTYSize{Rows: 10, Cols: 10}}); !IsCode(err, "bad_request") {
		t.Errorf("resize of a job without a terminal: %v, want bad_request", err)
	}
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "input", Job: cat.Job, EOF: true}); err != nil {
		t.Fatalf("input eof: %v", err)
	}
	r, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "wait", Job: cat.Job, Timeout: 30 * time.Second})
	if err != nil || !r.Done || r.ExitCode != 0 || r.Stdout != "Hello\n" {
		t.Fatalf("cat's wait = %+v, %v; want exit 0 and stdout %q", r, err, "Hello\n")
	}
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "input", Job: cat.Job, Input: "late\n"}); !IsCode(err, "bad_request") {
		t.Errorf("input to a job that ended: %v, want bad_request", err)
	}

	sleep, err := c.Command(ctx, s.ID, "sleep 300", &CommandOptions{Background: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "input", Job: sleep.Job, Input: "x"}); !IsCode(err, "bad_request") {
		t.Errorf("input to a job started without stdin: %v, want bad_request", err)
	}
	c.Command(ctx, s.ID, "", &CommandOptions{Action: "kill", Job: sleep.Job})
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "input", Job: "job-999", Input: "x"}); !IsCode(err, "not_found") {
		t.Errorf("input to an unknown job: %v, want not_found", err)
	}

	sh, err := c.Command(ctx, s.ID, "bash", &CommandOptions{Background: true, PTY: &PTYSize{Rows: 24, Cols: 80}})
	if err != nil || sh.Done {
		t.Fatalf("bash in a terminal = %+v, %v", sh, err)
	}
	defer c.Command(ctx, s.ID, "", &CommandOptions{Action: "kill", Job: sh.Job})
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "input", Job: sh.Job, Input: "stty size\n"}); err != nil {
		t.Fatalf("input to the terminal: %v", err)
	}
	// Resize only once bash has answered, so its answer is the old size.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "wait", Job: sh.Job, Timeout: 200 * time.Millisecond})
		if err != nil || r.Done {
			t.Fatalf("bash in a terminal: %+v, %v", r, err)
		}
		if strings.Contains(r.Stdout, "24 80") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"24 80\" from stty size in a 24x80 terminal: stdout %q", r.Stdout)
		}
	}
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "input", Job: sh.Job, EOF: true}); !IsCode(err, "bad_request") {
		t.Errorf("eof to a terminal: %v, want bad_request", err)
	}
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "resize", Job: sh.Job, PTY: &PTYSize{Rows: 30, Cols: 100}}); err != nil {
		t.Fatalf("resize: %v", err)
	}
	if _, err := c.Command(ctx, s.ID, "", &CommandOptions{Action: "input", Job: sh.Job, Input: "stty size; exit\n"}); err != nil {
		t.Fatalf("input to the terminal: %v", err)
	}
	r, err = c.Command(ctx, s.ID, "", &CommandOptions{Action: "wait", Job: sh.Job, Timeout: 30 * time.Second})
	if err != nil || !r.Done || r.ExitCode != 0 || !strings.Contains(r.Stdout, "30 100") || r.Stderr != "" {
		t.Fatalf("bash's wait = %+v, %v; want exit 0, \"30 100\" on stdout and no stderr (a terminal's output is all stdout)", r, err)
	}
}

func TestHTTPClientCommandStdin(t *testing.T) {
	svc := startService(t)
	c := NewHTTP(svc.Sock)
	defer c.CloseIdleConnections()
	commandStdin(t, c)
}

func TestJSONLClientCommandStdin(t *testing.T) {
	commandStdin(t, startJSONL(t))
}

// TestCommandBodyMatchesRequest: every field the client sends for a
// command is a field of the server's request, with the same JSON options,
// and the terminal's size is the server's.
func TestCommandBodyMatchesRequest(t *testing.T) {
	mine, theirs := jsonFields(reflect.TypeOf(commandBody{})), jsonFields(reflect.TypeOf(api.Request{}))
	for name, typ := range mine {
		if tt, ok := theirs[name]; !ok {
			t.Errorf("commandBody sends %q, which api.Request does not have", name)
		} else if tt != typ {
			t.Errorf("commandBody.%s is %s, api.Request's is %s", name, typ, tt)
		}
	}
	for _, f := range []string{"stdin", "pty", "input", "eof"} {
		if _, ok := mine[f]; !ok {
			t.Errorf("commandBody lacks %q", f)
		}
	}
	if m, s := jsonFields(reflect.TypeOf(PTYSize{})), jsonFields(reflect.TypeOf(seam.PTYSize{})); !reflect.DeepEqual(m, s) {
		t.Errorf("PTYSize fields %v, seam.PTYSize's %v", m, s)
	}
	if MaxCommandInput != seam.MaxCommandInput {
		t.Errorf("MaxCommandInput %d, the server's %d", MaxCommandInput, seam.MaxCommandInput)
	}
}
