package session

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/store"
)

// TestPersistWithDefaultFileStore: a manager given only a store (what a
// fresh install's store.url, file:///var/lib/jailcell/store, gives it;
// here a temporary directory) and no StoreDir persists and restores.
func TestPersistWithDefaultFileStore(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, func(c *Config) {
		st, err := store.Open(store.Options{URL: "file://" + dir})
		if err != nil {
			t.Fatal(err)
		}
		c.StoreDir, c.Store = "", st
	})
	id := e.create(t, CreateOptions{Persist: "proj"})
	e.exec(t, id, "open('kept.txt','w').write('from the first session')", 0)
	if err := e.m.Close(context.Background(), 0, id); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dir + "/uid=0/proj/kept.txt"); err != nil || string(b) != "from the first session" {
		t.Fatalf("file store entry: %q %v", b, err)
	}
	info, err := e.m.Create(context.Background(), CreateOptions{Persist: "proj"})
	if err != nil {
		t.Fatal(err)
	}
	if res := e.exec(t, info.ID, "print(open('kept.txt').read())", 0); res.Stdout != "from the first session\n" {
		t.Fatalf("restored: %q", res.Stdout)
	}
}

// TestPersistToS3: persisted workspaces in S3 (a real versitygw): saved
// after each cell, restored at create with the same name, verified (an
// object changed behind the store's back fails the create, naming it), and
// with the store down a create with persist answers unavailable naming
// the store while sessions already running keep running cells.
func TestPersistToS3(t *testing.T) {
	srv := testenv.StartS3(t)
	e := newEnv(t, useS3(t, srv))
	ctx := context.Background()
	id := e.create(t, CreateOptions{Owner: 1000, Persist: "proj"})
	if _, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "import os\nos.makedirs('data/deep', exist_ok=True)\nopen('data/deep/model.txt','w').write('v1')\nopen('gone.txt','w').write('x')\nv = 1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Exec(ctx, 1000, id, ExecRequest{Code: "os.remove('gone.txt')"}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Close(ctx, 1000, id); err != nil {
		t.Fatal(err)
	}
	// Signed: the fleet key's header, then the data.
	signedRaw, err := os.ReadFile(srv.ObjectPath("node/uid=1000/proj/data/deep/model.txt"))
	if err != nil || len(signedRaw) != store.SigHeaderLen+2 || !bytes.HasSuffix(signedRaw, []byte("v1")) {
		t.Fatalf("object in the S3 server's directory: %q %v", signedRaw, err)
	}
	info, err := e.m.Create(ctx, CreateOptions{Owner: 1000, Persist: "proj"})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Restored) != 1 || info.Restored[0] != "data/deep/model.txt" {
		t.Fatalf("restored: %v (gone.txt was deleted)", info.Restored)
	}
	res, err := e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "print(open('data/deep/model.txt').read(), 'v' in globals())"})
	if err != nil || res.Stdout != "v1 False\n" {
		t.Fatalf("restored workspace: %v %+v", err, res)
	}
	// Another owner's same name is another workspace.
	other, err := e.m.Create(ctx, CreateOptions{Owner: 1001, Persist: "proj"})
	if err != nil || len(other.Restored) != 0 {
		t.Fatalf("owner 1001's proj: %v %+v", err, other)
	}

	// Tampered with behind the store's back: same size, one byte changed.
	if err := os.WriteFile(srv.ObjectPath("node/uid=1000/proj/data/deep/model.txt"), append(signedRaw[:store.SigHeaderLen], "v2"...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Create(ctx, CreateOptions{Owner: 1000, Persist: "proj"})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "sha256") || !strings.Contains(err.Error(), "model.txt") {
		t.Fatalf("create from a tampered store: %v, want unavailable naming the file and its sha256", err)
	}

	// Down.
	srv.Stop()
	defer srv.Start(t)
	_, err = e.m.Create(ctx, CreateOptions{Owner: 1000, Persist: "proj"})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), srv.Endpoint) {
		t.Fatalf("create with persist, store down: %v, want unavailable naming the store", err)
	}
	res, err = e.m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "open('more.txt','w').write('y'); print('ran')"})
	if err != nil || res.Stdout != "ran\n" {
		t.Fatalf("cell of a persisted session with the store down: %v %+v", err, res)
	}
}

// useS3 is a config change that keeps persisted workspaces in srv (a real
// versitygw), signed with the fleet key, under the prefix node.
func useS3(t *testing.T, srv *testenv.S3) func(*Config) {
	srv.SetEnv(t)
	return func(c *Config) {
		st, err := store.Open(store.Options{URL: "s3://" + srv.Bucket + "/node", Timeout: 5 * time.Second,
			S3: store.S3Options{Endpoint: srv.Endpoint, Region: "us-east-1"}, Keys: fleetKeys(t)})
		if err != nil {
			t.Fatal(err)
		}
		c.StoreDir, c.Store = "", st
	}
}
