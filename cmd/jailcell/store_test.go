package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
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
	b := make([]byte, 6)
	rand.Read(b)
	name := "jailcell-test-" + hex.EncodeToString(b)
	defaultDir := strings.TrimPrefix(store.DefaultURL, "file://")
	entry := filepath.Join(defaultDir, fmt.Sprintf("uid=%d", os.Getuid()), name)
	t.Cleanup(func() { os.RemoveAll(entry) })
	persistTwice(t, "", name, nil)
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("not in the default store: %v", err)
	}
}

// TestPersistToS3Config: the store.* keys and the AWS_* variables take the
// real binary's persisted workspaces to S3 (a versitygw on loopback).
func TestPersistToS3Config(t *testing.T) {
	testenv.RequiresRoot(t)
	srv := testenv.StartS3(t)
	cfg := fmt.Sprintf("store:\n  url: s3://%s/node1\n  key_file: %s\n  s3:\n    endpoint: %s\n    region: us-east-1\n", srv.Bucket, storeKeyFile(t), srv.Endpoint)
	persistTwice(t, cfg, "proj", srv.Env())
	// Signed with the fleet key (its name in the header), the data after it.
	b, err := os.ReadFile(srv.ObjectPath(fmt.Sprintf("node1/uid=%d/proj/notes.txt", os.Getuid())))
	if err != nil || len(b) != store.SigHeaderLen+len("kept by the store") || !strings.HasSuffix(string(b), "kept by the store") || !strings.Contains(string(b[:store.SigHeaderLen]), "fleet-test") {
		t.Fatalf("object in S3: %q %v", b, err)
	}
}

// storeKeyFile writes a fleet key file (store.key_file) for a shared store.
func storeKeyFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "store.keys")
	if err := os.WriteFile(p, []byte("fleet-test "+base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// persistTwice runs `jailcell json` with config (YAML, "" for an empty
// file) twice: the first creates session persist name and writes a file,
// the second creates it again and reads the file back.
func persistTwice(t *testing.T, config, name string, env []string) {
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(lines ...string) []map[string]any {
		t.Helper()
		cmd := exec.Command(os.Args[0], "json", "--config", cfgPath, "--rootfs", r.Root, "--state-dir", state)
		cmd.Env = jailcellEnv(append([]string{"JAILCELL_REVIEW_DIR=" + state + "/review"}, env...)...)
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
		`{"id":2,"op":"exec","session":"SESSION","code":"open('notes.txt','w').write('kept by the store')"}`)
	if first[0]["session"] == nil {
		t.Fatalf("create answered %v", first[0])
	}
	second := run(`{"id":1,"op":"create","persist":"`+name+`"}`,
		`{"id":2,"op":"exec","session":"SESSION","code":"print(open('notes.txt').read())"}`)
	if r := second[0]["restored"]; fmt.Sprint(r) != "[notes.txt]" {
		t.Fatalf("second create restored %v", r)
	}
	res, _ := second[1]["result"].(map[string]any)
	if got := res["stdout"]; got != "kept by the store\n" {
		t.Fatalf("second create's cell printed %q (answers %v)", got, second)
	}
}
