package main

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/e2b"
)

// domainRE is what e2b.domain may be: DNS labels.
var domainRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$`)

// checkE2B: the E2B door needs API keys to admit anyone, a valid address,
// and templates that name configured policies.
func checkE2B(c *config) error {
	if c.E2BDomain != "" && !domainRE.MatchString(c.E2BDomain) {
		return fmt.Errorf("e2b.domain = %q: want a DNS name of two or more labels, e.g. sandbox.example.org", c.E2BDomain)
	}
	if _, err := e2bTemplates(c); err != nil {
		return err
	}
	if c.E2BListen == "" {
		return nil
	}
	if _, err := listenAddr(c.E2BListen); err != nil {
		return fmt.Errorf("e2b.%w", err)
	}
	if c.TokensFile == "" {
		return fmt.Errorf("e2b.listen = %q needs auth.tokens_file: an E2B API key (X-API-KEY) is one of its tokens, and names the caller", c.E2BListen)
	}
	return nil
}

// e2bTemplates reads e2b.templates (NAME=POLICY each); none configured
// means e2b.DefaultTemplates.
func e2bTemplates(c *config) (map[string]string, error) {
	if len(c.E2BTemplates) == 0 {
		return e2b.DefaultTemplates, nil
	}
	out := map[string]string{}
	for _, t := range c.E2BTemplates {
		name, pol, ok := strings.Cut(t, "=")
		if !ok || name == "" || pol == "" {
			return nil, fmt.Errorf("e2b.templates: %q: want NAME=POLICY", t)
		}
		if _, ok := c.Policies[pol]; !ok && pol != "default" {
			return nil, fmt.Errorf("e2b.templates: %q: no policy %q in policies", t, pol)
		}
		if pol == "default" {
			pol = ""
		}
		out[name] = pol
	}
	return out, nil
}

// e2bSecret reads the key that signs sandboxes' access tokens, making it
// on first use: kept in the state dir, so tokens stay good across
// restarts, and root's alone.
func e2bSecret(stateDir string) ([]byte, error) {
	dir := filepath.Join(stateDir, "e2b")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "secret")
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) < 32 {
			return nil, fmt.Errorf("%s: %d bytes, want 32 or more (remove it to make a new one; access tokens handed out end with it)", path, len(b))
		}
		return b, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, err
	}
	return b, os.Rename(tmp, path)
}

// e2bServer makes the E2B door's listener and server over h, or nil when
// e2b.listen is not set.
func e2bServer(cfg *config, h api.Handler, log *slog.Logger) (net.Listener, *http.Server, error) {
	if cfg.E2BListen == "" {
		return nil, nil, nil
	}
	tokens, err := readTokens(cfg.TokensFile)
	if err != nil {
		return nil, nil, err
	}
	templates, err := e2bTemplates(cfg)
	if err != nil {
		return nil, nil, err
	}
	secret, err := e2bSecret(cfg.StateDir)
	if err != nil {
		return nil, nil, fmt.Errorf("e2b access-token secret: %w", err)
	}
	door, err := e2b.New(h, e2b.Options{Keys: e2b.NewKeys(tokens).Owner, Secret: secret, Domain: cfg.E2BDomain, Templates: templates,
		StateDir: filepath.Join(cfg.StateDir, "e2b", "sandboxes"), Logger: log, PublicPorts: cfg.E2BPublicPorts})
	if err != nil {
		return nil, nil, err
	}
	addr, err := listenAddr(cfg.E2BListen)
	if err != nil {
		return nil, nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", cfg.E2BListen, err)
	}
	if cfg.TLSCert != "" {
		cert, err := loadKeyPair(cfg)
		if err != nil {
			l.Close()
			return nil, nil, err
		}
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	// A slow or silent client holds a connection, never the daemon: the
	// headers must come within 10 s (slowloris), and an idle keep-alive
	// ends after 2 min. Bodies and streams are bounded by their routes.
	srv := &http.Server{Handler: door, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	return l, srv, nil
}
