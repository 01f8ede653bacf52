package api

import (
	"strings"
	"testing"
)

// TestDecodeE2BOps: the E2B-shaped ops' fields decode, and each refusal
// names the field and what is allowed.
func TestDecodeE2BOps(t *testing.T) {
	ok := e2bDecodeLines
	req, _ := DecodeRequest([]byte(ok[0]))
	if req.Envs["A"] != "b" || req.Cmd != "ls" || req.Cwd != "d" || !req.Background {
		t.Errorf("decoded %+v", req)
	}
	for _, line := range ok {
		if _, err := DecodeRequest([]byte(line)); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
	for line, want := range e2bDecodeRefusals {
		_, err := DecodeRequest([]byte(line))
		if err == nil || err.Code != CodeBadRequest || !strings.Contains(err.Message, want) {
			t.Errorf("%s: %v, want bad_request with %q", line, err, want)
		}
	}
}

// e2bDecodeLines and e2bDecodeRefusals are also FuzzDecodeRequest's seeds.
var e2bDecodeLines = []string{
	`{"id":1,"op":"command","session":"s","cmd":"ls","envs":{"A":"b"},"cwd":"d","background":true,"timeout_s":3}`,
	`{"id":1,"op":"command","session":"s","action":"wait","job":"job-1"}`,
	`{"id":1,"op":"exec","session":"s","code":"1","envs":{"A":"b"}}`,
	`{"id":1,"op":"create","envs":{"A":"b"}}`,
	`{"id":1,"op":"watch","session":"s","path":"d","recursive":true}`,
	`{"id":1,"op":"watch","session":"s","action":"stop","watch":"watch-1"}`,
	`{"id":1,"op":"set_timeout","session":"s","timeout_s":60}`,
	`{"id":1,"op":"info","session":"s"}`,
	`{"id":1,"op":"metrics","session":"s"}`,
	`{"id":1,"op":"mkdir","session":"s","path":"d"}`,
	`{"id":1,"op":"exec","session":"s","code":"1","context":{"id":"c-1","cwd":"/work/d"}}`,
	`{"id":1,"op":"exec","session":"s","code":"","context":{"id":"c-1","reset":true}}`,
}

var e2bDecodeRefusals = map[string]string{
	`{"id":1,"op":"command","session":"s"}`:                                `needs field "cmd"`,
	`{"id":1,"op":"command","cmd":"ls"}`:                                   `needs field "session"`,
	`{"id":1,"op":"command","session":"s","action":"wait"}`:                `needs field "job"`,
	`{"id":1,"op":"command","session":"s","action":"run","cmd":"x"}`:       `allowed for op "command"`,
	`{"id":1,"op":"command","session":"s","cmd":"ls","envs":["A"]}`:        `field "envs" must be an object`,
	`{"id":1,"op":"command","session":"s","cmd":"ls","envs":{"A":1}}`:      `must map names to strings`,
	`{"id":1,"op":"watch","session":"s","action":"poll"}`:                  `needs field "watch"`,
	`{"id":1,"op":"watch","session":"s","action":"list"}`:                  `allowed for op "watch"`,
	`{"id":1,"op":"set_timeout","session":"s"}`:                            `needs field "timeout_s"`,
	`{"id":1,"op":"remove","session":"s"}`:                                 `needs field "path"`,
	`{"id":1,"op":"command","session":"s","cmd":"ls","background":"true"}`: `field "background" must be a boolean`,
	`{"id":1,"op":"exec","session":"s","code":"1","context":"c"}`:          `field "context" must be an object`,
	`{"id":1,"op":"exec","session":"s","code":"1","context":{"name":"c"}}`: `"context.name" is not a context option`,
	`{"id":1,"op":"exec","session":"s","code":"1","context":{"reset":1}}`:  `"context.reset" must be a boolean`,
	`{"id":1,"op":"exec","session":"s","code":"","context":{"id":"c"}}`:    `needs field "code"`,
	`{"id":1,"op":"info","session":"s","context":{"id":"c"}}`:              `only allowed with op "exec"`,
}
