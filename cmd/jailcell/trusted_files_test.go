package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHostileConfigWritableByOthersIsRefused: the config names programs
// root runs (fixer.command) and every policy. One that a group member or
// another user could change (group- or world-writable, or owned by neither
// root nor the daemon's user) was read as if root had written it.
func TestHostileConfigWritableByOthersIsRefused(t *testing.T) {
	hermeticConfig(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: the file is chowned to another user")
	}
	for _, tc := range []struct {
		name string
		set  func(p string) error
		want string
	}{
		{"group-writable", func(p string) error { return os.Chmod(p, 0o664) }, "lets others change it"},
		{"world-writable", func(p string) error { return os.Chmod(p, 0o646) }, "lets others change it"},
		{"another user's", func(p string) error { return os.Chown(p, 65534, 65534) }, "owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, "fixer:\n  command: [/tmp/x]\n")
			if err := tc.set(p); err != nil {
				t.Fatal(err)
			}
			_, err := runConfigCmd(t, "--config", p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("config %s: %v, want refused (%q, naming the file)", tc.name, err, tc.want)
			}
		})
	}
	// Readable by all is fine: only writes matter.
	p := writeConfig(t, "sessions:\n  max: 3\n")
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runConfigCmd(t, "--config", p); err != nil {
		t.Fatalf("a 0644 root config: %v", err)
	}
}

// TestHostileTLSFilesOthersCouldUse: a tls.key others can read lets them
// be this node to its callers; a tls.client_ca others can write lets them
// sign a certificate whose common name is root (owner 0). Both were read
// without a look at their modes.
func TestHostileTLSFilesOthersCouldUse(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, keyf, ca := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), filepath.Join(dir, "ca.pem")
	for p, b := range map[string][]byte{cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyf: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &config{TLSCert: cert, TLSKey: keyf, TLSClientCA: ca, Listen: "tcp://127.0.0.1:0"}
	if _, err := loadKeyPair(cfg); err != nil {
		t.Fatalf("a 0600 key: %v", err)
	}
	os.Chmod(keyf, 0o644)
	if _, err := loadKeyPair(cfg); err == nil || !strings.Contains(err.Error(), "tls.key") || !strings.Contains(err.Error(), "0644") {
		t.Errorf("a world-readable tls.key: %v, want refused naming tls.key and its mode", err)
	}
	os.Chmod(keyf, 0o600)
	os.Chmod(ca, 0o666)
	l, _, err := remoteListener(cfg)
	if err == nil {
		l.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "tls.client_ca") {
		t.Errorf("a world-writable tls.client_ca: %v, want refused naming tls.client_ca", err)
	}
}
