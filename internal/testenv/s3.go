package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 is a real S3 server for a test: versitygw (scripts/fetch-versitygw.sh,
// built once into its cache) serving a temporary directory on a free
// loopback port, with random keys and one bucket.
type S3 struct {
	Endpoint string // http://127.0.0.1:PORT
	Access   string
	Secret   string
	Bucket   string
	// Dir is the server's root: bucket B's object K is the file Dir/B/K.
	Dir string

	mu  sync.Mutex
	cmd *exec.Cmd
	log *LockedBuffer
	bin string
	arg []string
}

var (
	vgwOnce sync.Once
	vgwBin  string
	vgwErr  error
)

// versitygw returns the pinned versitygw, built by its script if the cache
// lacks it (about 3 minutes cold).
func versitygw(t testing.TB) string {
	vgwOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "fetch-versitygw.sh")
		out, err := exec.Command(script).Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			vgwErr = fmt.Errorf("scripts/fetch-versitygw.sh: %v\n%s", err, msg)
			return
		}
		vgwBin = strings.TrimSpace(string(out))
	})
	if vgwErr != nil {
		t.Fatal(vgwErr)
	}
	return vgwBin
}

// StartS3 starts a versitygw for t, stopped at its end.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	bin := versitygw(t)
	dir := t.TempDir()
	s := &S3{Access: randHex(10), Secret: randHex(20), Bucket: "jailcell-test", Dir: dir, bin: bin}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s.Endpoint = "http://" + addr
	s.arg = []string{"--access", s.Access, "--secret", s.Secret, "--port", addr, "posix", dir}
	s.Start(t)
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("versitygw log, its end:\n%s", s.log.Tail(200))
		}
	})
	c, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(s.Access, s.Secret, ""), BucketLookup: minio.BucketLookupPath, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("make bucket: %v\n%s", err, s.log.String())
	}
	return s
}

// Start (re)starts the server on its address and waits until it answers.
func (s *S3) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		s.log = &LockedBuffer{}
	}
	cmd := exec.Command(s.bin, s.arg...)
	cmd.Env = ChildEnv()
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// No Pdeathsig: it fires when the OS thread that started the child
	// exits, and tests that lock threads into namespaces end threads.
	// t.Cleanup stops it.
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd = cmd
	addr := strings.TrimPrefix(s.Endpoint, "http://")
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw did not listen on %s within 60 s:\n%s", addr, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server (a store that is down); Start brings it back.
func (s *S3) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Env is the environment a store client of this server needs.
func (s *S3) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.Access, "AWS_SECRET_ACCESS_KEY=" + s.Secret}
}

// SetEnv sets Env in this process for t.
func (s *S3) SetEnv(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", s.Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.Secret)
}

// ObjectPath is where the server keeps key's data under prefix.
func (s *S3) ObjectPath(key string) string { return filepath.Join(s.Dir, s.Bucket, key) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
