package httpapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// startTCP serves on a loopback TCP port (TLS when tc is set).
func startTCP(t *testing.T, opts HTTPOptions, tc *tls.Config) (*HTTPServer, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if tc != nil {
		l = tls.NewListener(l, tc)
	}
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := NewHTTPServer(testDispatcher(nil), opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, addr
}

func call(t *testing.T, c *http.Client, method, url, token string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(map[bool]string{true: "{}", false: ""}[method == "POST"]))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, string(b)
}

// TestTCPBearerAuth: on TCP every request but /healthz and /readyz needs a
// token from the node's list; those two say only yes or no to anyone;
// a drain turns readyz false and refuses creates.
func TestTCPBearerAuth(t *testing.T) {
	good := "tok-" + strings.Repeat("a", 40)
	var started atomic.Bool
	srv, addr := startTCP(t, HTTPOptions{Node: "n9", Remote: NewRemoteAuth(map[string]uint32{good: 1000, "tok-" + strings.Repeat("b", 40): 0}),
		Ready: func() error {
			if !started.Load() {
				return errors.New("starting")
			}
			return nil
		}}, nil)
	base := "http://" + addr
	c := &http.Client{Timeout: 30 * time.Second}

	if st, _, body := call(t, c, "GET", base+"/healthz", ""); st != 200 || strings.TrimSpace(body) != `{"ok":true}` {
		t.Errorf("unauthenticated healthz: %d %q, want 200 {\"ok\":true} and nothing else", st, body)
	}
	if st, _, body := call(t, c, "GET", base+"/readyz", ""); st != 503 || strings.TrimSpace(body) != `{"ok":false}` {
		t.Errorf("readyz before ready: %d %q", st, body)
	}
	started.Store(true)
	if st, _, body := call(t, c, "GET", base+"/readyz", ""); st != 200 || strings.TrimSpace(body) != `{"ok":true}` {
		t.Errorf("readyz when ready: %d %q", st, body)
	}
	for _, tok := range []string{"", "wrong", good + "x", good[:len(good)-1]} {
		st, h, body := call(t, c, "GET", base+"/v1/sessions", tok)
		if st != 401 || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(body, `"forbidden"`) {
			t.Errorf("token %q: %d %q %q, want 401 with WWW-Authenticate: Bearer", tok, st, h.Get("WWW-Authenticate"), body)
		}
	}
	if st, h, body := call(t, c, "GET", base+"/healthz", good); st != 200 || !strings.Contains(body, `"version":"test-1"`) || h.Get("X-Jailcell-Node") != "n9" {
		t.Errorf("authenticated healthz: %d %q node %q, want the ping from n9", st, body, h.Get("X-Jailcell-Node"))
	}
	if _, h, _ := call(t, c, "GET", base+"/healthz", ""); h.Get("X-Jailcell-Node") != "" {
		t.Errorf("unauthenticated healthz names the node: %q", h.Get("X-Jailcell-Node"))
	}
	srv.SetDraining()
	if st, _, body := call(t, c, "GET", base+"/readyz", ""); st != 503 || strings.TrimSpace(body) != `{"ok":false}` {
		t.Errorf("readyz while draining: %d %q", st, body)
	}
	st, _, body := call(t, c, "POST", base+"/v1/sessions", good)
	if st != 503 || !strings.Contains(body, `"unavailable"`) || !strings.Contains(body, "draining") {
		t.Errorf("create while draining: %d %q, want 503 unavailable naming the drain", st, body)
	}
}

// TestTCPMutualTLS: with a client CA, the verified certificate's common
// name is the owner; a connection without a certificate of that CA gets
// no answer at all.
func TestTCPMutualTLS(t *testing.T) {
	ca, caKey := newCert(t, "test ca", nil, nil, true)
	srvCert, srvKey := newCert(t, "127.0.0.1", ca, caKey, false)
	cliCert, cliKey := newCert(t, "1000", ca, caKey, false)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	auth := NewRemoteAuth(nil)
	auth.CertOwner = func(c *x509.Certificate) (uint32, error) {
		n, err := strconv.ParseUint(c.Subject.CommonName, 10, 32)
		return uint32(n), err
	}
	_, addr := startTCP(t, HTTPOptions{Remote: auth}, &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvCert.Raw}, PrivateKey: srvKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12})
	client := func(withCert bool) *http.Client {
		tc := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
		if withCert {
			tc.Certificates = []tls.Certificate{{Certificate: [][]byte{cliCert.Raw}, PrivateKey: cliKey}}
		}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	}
	if st, _, body := call(t, client(true), "GET", "https://"+addr+"/healthz", ""); st != 200 || !strings.Contains(body, `"version":"test-1"`) {
		t.Errorf("healthz with a client certificate: %d %q, want the ping", st, body)
	}
	req, _ := http.NewRequest("GET", "https://"+addr+"/healthz", nil)
	if resp, err := client(false).Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate got an answer: %d", resp.StatusCode)
	}
}

func newCert(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        isCA, BasicConstraintsValid: true}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}
