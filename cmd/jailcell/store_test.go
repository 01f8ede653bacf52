package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/store"
)

// TestPersistWorksWithNoConfig: on a fresh install (an empty configuration
// file, no store keys) {"op":"create","persist":"x"} works: the store is
// file:///var/lib/jailcell/store, and a second create with the same name
// gets the file back. The entry it writes there is removed afterwards.
func TestPersistWorksWithNoConfig(t *testing.T) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	empty := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "jailcell-test-" + hex.EncodeToString(b)
	defaultDir := strings.TrimPrefix(store.DefaultURL, "file://")
	t.Cleanup(func() { os.RemoveAll(filepath.Join(defaultDir, fmt.Sprintf("uid=%d", os.Getuid()), name)) })

	run := func(lines ...string) []map[string]any {
		t.Helper()
		cmd := exec.Command(os.Args[0], "json", "--config", empty, "--rootfs", r.Root, "--state-dir", state)
		cmd.Env = jailcellEnv("JAILCELL_REVIEW_DIR=" + state + "/review")
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		var stderr testenv.LockedBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			in.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
				<-done
			}
		}()
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var resps []map[string]any
		session := ""
		for _, l := range lines {
			l = strings.ReplaceAll(l, "SESSION", session)
			if _, err := fmt.Fprintln(in, l); err != nil {
				t.Fatal(err)
			}
			if !sc.Scan() {
				t.Fatalf("no answer to %s: %v\n%s", l, sc.Err(), stderr.String())
			}
			var resp map[string]any
			if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
				t.Fatalf("answer %s: %v", sc.Bytes(), err)
			}
			if resp["error"] != nil {
				t.Fatalf("%s answered %s\n%s", l, sc.Bytes(), stderr.String())
			}
			if id, ok := resp["session"].(string); ok && session == "" {
				session = id
			}
			resps = append(resps, resp)
		}
		return resps
	}
	first := run(`{"id":1,"op":"create","persist":"`+name+`"}`,
		`{"id":2,"op":"exec","session":"SESSION","code":"open('notes.txt','w').write('kept by the default store')"}`)
	if first[0]["session"] == nil {
		t.Fatalf("create answered %v", first[0])
	}
	if _, err := os.Stat(filepath.Join(defaultDir, fmt.Sprintf("uid=%d", os.Getuid()), name, "notes.txt")); err != nil {
		t.Fatalf("not in the default store: %v", err)
	}
	second := run(`{"id":1,"op":"create","persist":"`+name+`"}`,
		`{"id":2,"op":"exec","session":"SESSION","code":"print(open('notes.txt').read())"}`)
	if r := second[0]["restored"]; fmt.Sprint(r) != "[notes.txt]" {
		t.Fatalf("second create restored %v", r)
	}
	res, _ := second[1]["result"].(map[string]any)
	if got := res["stdout"]; got != "kept by the default store\n" {
		t.Fatalf("second create's cell printed %q (answers %v)", got, second)
	}
}
