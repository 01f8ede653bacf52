package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"

	"github.com/jailcell/jailcell/api/httpapi"
	"github.com/jailcell/jailcell/internal/secretfile"
	"github.com/jailcell/jailcell/session"
)

// checkNodeID fills node.id from the host name when unset and checks it.
func checkNodeID(c *config) error {
	if c.Session.NodeID == "" {
		h, _ := os.Hostname()
		c.Session.NodeID = session.NodeFromHostname(h)
	}
	if !session.NodeIDPattern.MatchString(c.Session.NodeID) {
		return fmt.Errorf("node.id = %q: want 1-16 of [a-z0-9] (it starts every session id, and a proxy routes by it)", c.Session.NodeID)
	}
	return nil
}

// listenAddr is the host:port of a listen value (tcp://HOST:PORT).
func listenAddr(v string) (string, error) {
	addr, ok := strings.CutPrefix(v, "tcp://")
	if !ok {
		return "", fmt.Errorf("listen = %q: want tcp://HOST:PORT, e.g. tcp://10.0.0.5:7070", v)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("listen = %q: want tcp://HOST:PORT: %v", v, err)
	}
	if host != "" && net.ParseIP(host) == nil {
		return "", fmt.Errorf("listen = %q: HOST must be an IP address (or empty for every address), not a name", v)
	}
	return addr, nil
}

// checkListen: TCP is served only with a way to authenticate on it.
func checkListen(c *config) error {
	tlsFiles := c.TLSCert != "" || c.TLSKey != "" || c.TLSClientCA != ""
	if tlsFiles && (c.TLSCert == "" || c.TLSKey == "") {
		return fmt.Errorf("tls.cert = %q, tls.key = %q: set both (and tls.client_ca for mutual TLS), or neither", c.TLSCert, c.TLSKey)
	}
	if c.TLSClientCA != "" && c.TokensFile != "" {
		return fmt.Errorf("auth.tokens_file and tls.client_ca are both set: choose one way to name the caller (tokens, or client certificates)")
	}
	if c.Listen == "" {
		return nil
	}
	if _, err := listenAddr(c.Listen); err != nil {
		return err
	}
	if c.TokensFile == "" && c.TLSClientCA == "" {
		return fmt.Errorf("listen = %q needs authentication: a peer uid does not cross hosts; set auth.tokens_file (bearer tokens) or tls.cert, tls.key and tls.client_ca (mutual TLS)", c.Listen)
	}
	return nil
}

// maxTokensFile bounds the tokens file read.
const maxTokensFile = 1 << 20

// tokenRE is what a bearer token may be: RFC 6750's b64token characters,
// long enough not to be guessed.
var tokenRE = regexp.MustCompile(`^[A-Za-z0-9._~+/=-]{32,512}$`)

// readTokens reads auth.tokens_file: "TOKEN OWNER" lines. The file holds
// credentials, so one that anyone but root could read or replace is
// refused, not used.
func readTokens(path string) (map[string]uint32, error) {
	b, err := secretfile.Read("auth.tokens_file", path, maxTokensFile, false)
	if err != nil {
		return nil, err
	}
	return parseTokens(path, b, lookupUser)
}

// parseTokens reads "TOKEN OWNER" lines, resolving each owner with
// lookup. Errors name the line, never the token.
func parseTokens(path string, b []byte, lookup func(string) (uint32, error)) (map[string]uint32, error) {
	if len(b) > maxTokensFile {
		return nil, fmt.Errorf("auth.tokens_file %s: over the %d-byte limit", path, maxTokensFile)
	}
	tokens := map[string]uint32{}
	for i, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("auth.tokens_file %s line %d: want TOKEN OWNER, got %d fields", path, i+1, len(fields))
		}
		if !tokenRE.MatchString(fields[0]) {
			// Never echo the token itself.
			return nil, fmt.Errorf("auth.tokens_file %s line %d: a token must be 32-512 of [A-Za-z0-9._~+/=-]", path, i+1)
		}
		owner, err := lookup(fields[1])
		if err != nil {
			// Not echoed either: a line written "OWNER TOKEN" would
			// put the token here.
			return nil, fmt.Errorf("auth.tokens_file %s line %d: the owner (second field) is not a uid or a user name of this host; want TOKEN OWNER", path, i+1)
		}
		if _, dup := tokens[fields[0]]; dup {
			return nil, fmt.Errorf("auth.tokens_file %s line %d: a token listed twice", path, i+1)
		}
		tokens[fields[0]] = owner
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("auth.tokens_file %s: no tokens; nobody could call", path)
	}
	return tokens, nil
}

// remoteListener opens the TCP listener of cfg.Listen with its
// authentication: bearer tokens, or mutual TLS naming the owner by its
// certificate's common name.
func remoteListener(cfg *config) (net.Listener, *httpapi.RemoteAuth, error) {
	addr, err := listenAddr(cfg.Listen)
	if err != nil {
		return nil, nil, err
	}
	auth := httpapi.NewRemoteAuth(nil)
	if cfg.TokensFile != "" {
		tokens, err := readTokens(cfg.TokensFile)
		if err != nil {
			return nil, nil, err
		}
		auth = httpapi.NewRemoteAuth(tokens)
	}
	var tc *tls.Config
	if cfg.TLSCert != "" {
		cert, err := loadKeyPair(cfg)
		if err != nil {
			return nil, nil, err
		}
		tc = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if cfg.TLSClientCA != "" {
			// Whoever could write the CA could sign a certificate naming
			// root (owner 0, every owner's sessions).
			pem, err := secretfile.ReadTrusted("tls.client_ca", cfg.TLSClientCA, maxTLSFile)
			if err != nil {
				return nil, nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("tls.client_ca %s: no PEM certificate in it", cfg.TLSClientCA)
			}
			tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
			auth.CertOwner = func(c *x509.Certificate) (uint32, error) {
				owner, err := lookupUser(c.Subject.CommonName)
				if err != nil {
					return 0, fmt.Errorf("client certificate common name %q: not a uid or user name of this node", c.Subject.CommonName)
				}
				return owner, nil
			}
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	if tc != nil {
		l = tls.NewListener(l, tc)
	}
	return l, auth, nil
}

// maxTLSFile bounds a PEM file read: a certificate chain or key is a few
// KiB.
const maxTLSFile = 1 << 20

// loadKeyPair reads the listener's certificate and key. The key must be
// the daemon's user's, unreadable by others (0600, 0400, or 0640/0440 for
// a group of operators), as an ssh host key must: anyone who reads it can
// be this node to its callers.
func loadKeyPair(cfg *config) (tls.Certificate, error) {
	certPEM, err := secretfile.ReadTrusted("tls.cert", cfg.TLSCert, maxTLSFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := secretfile.Read("tls.key", cfg.TLSKey, maxTLSFile, true)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls.cert, tls.key: %w", err)
	}
	return cert, nil
}
