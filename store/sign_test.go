package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/store"
)

func ring(t testing.TB, pairs ...[2]string) *store.Keyring {
	t.Helper()
	k, err := store.NewKeyring(pairs...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var (
	oldKey   = [2]string{"fleet-2025", strings.Repeat("o", 32)}
	newKey   = [2]string{"fleet-2026", strings.Repeat("n", 32)}
	otherKey = [2]string{"fleet-2025", strings.Repeat("x", 32)} // same name, another secret
)

// rawFile is a file store with no key: what an attacker with write access
// to the store (its credentials, or root on the box serving it) uses;
// every object it writes gets a correct sha256.
func rawFile(t *testing.T) (store.Store, string) {
	dir := t.TempDir()
	st, err := store.OpenUnsigned(store.Options{URL: "file://" + dir, Shared: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return st, dir
}

func mustPut(t *testing.T, st store.Store, key string, data []byte) {
	t.Helper()
	if _, err := st.Put(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func mustRaw(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	b, err := store.ReadAll(context.Background(), st, key, 1<<20)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

// TestKeyringRotation: the first key signs, every key verifies; a node
// that has dropped the old key refuses what only it signed.
func TestKeyringRotation(t *testing.T) {
	ctx := context.Background()
	raw, _ := rawFile(t)
	before := store.Sign(raw, ring(t, oldKey))
	mustPut(t, before, "uid=1/ws/a", []byte("signed with the old key"))
	during := store.Sign(raw, ring(t, newKey, oldKey))
	if got, err := store.ReadAll(ctx, during, "uid=1/ws/a", 100); err != nil || string(got) != "signed with the old key" {
		t.Fatalf("old object under old+new keys: %q %v", got, err)
	}
	mustPut(t, during, "uid=1/ws/b", []byte("signed with the new key"))
	if got := mustRaw(t, raw, "uid=1/ws/b"); !bytes.Contains(got, []byte("fleet-2026")) {
		t.Fatalf("a new object is not signed with the first key: %q", got[:store.SigHeaderLen])
	}
	if _, err := store.ReadAll(ctx, before, "uid=1/ws/b", 100); !errors.Is(err, store.ErrUnsigned) || !strings.Contains(err.Error(), "fleet-2026") {
		t.Fatalf("new object under the old key alone: %v, want ErrUnsigned naming fleet-2026", err)
	}
	after := store.Sign(raw, ring(t, newKey))
	if _, err := store.ReadAll(ctx, after, "uid=1/ws/a", 100); !errors.Is(err, store.ErrUnsigned) {
		t.Fatalf("old object once the old key is dropped: %v, want ErrUnsigned", err)
	}
	if n, ok := store.Signer(store.Quota(during, 1<<30, "q")); !ok || n != "fleet-2026" {
		t.Fatalf("Signer: %q %v", n, ok)
	}
}

// TestSignedRefusesForgery: each way an attacker with the store's
// credentials but not the fleet key can change a signed store is refused
// naming the object: an unsigned object (with a correct sha256), one
// signed with another secret under the same key name, an edited body with
// its sha256 recomputed, an edited header, and a valid object or record
// replayed under another key (another owner, another session).
func TestSignedRefusesForgery(t *testing.T) {
	ctx := context.Background()
	raw, _ := rawFile(t)
	st := store.Sign(raw, ring(t, oldKey))
	mustPut(t, st, "uid=1000/ws/secret.txt", []byte("owner 1000's secret"))
	if _, err := st.Swap(ctx, "hibernated/a/lease", "", []byte(`{"id":"a","owner":1000}`)); err != nil {
		t.Fatal(err)
	}
	refused := func(what, key string, want error) {
		t.Helper()
		_, err := store.ReadAll(ctx, st, key, 1<<20)
		if !errors.Is(err, want) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: read %v, want %v naming %s", what, err, want, key)
		}
	}
	refusedRecord := func(what, key string) {
		t.Helper()
		_, _, err := st.Record(ctx, key, 1<<20)
		if !errors.Is(err, store.ErrUnsigned) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: record %v, want ErrUnsigned naming %s", what, err, key)
		}
	}

	mustPut(t, raw, "uid=1000/ws/planted", []byte("no signature at all, a correct sha256"))
	refused("unsigned object", "uid=1000/ws/planted", store.ErrUnsigned)
	mustPut(t, raw, "uid=1000/ws/long", bytes.Repeat([]byte("unsigned and longer than a header "), 10))
	refused("unsigned long object", "uid=1000/ws/long", store.ErrUnsigned)

	other := store.Sign(raw, ring(t, otherKey))
	mustPut(t, other, "uid=1000/ws/other", []byte("signed by a key of the same name"))
	refused("wrong secret", "uid=1000/ws/other", store.ErrUnsigned)

	// Body edited, store checksum recomputed (the raw put does it).
	b := mustRaw(t, raw, "uid=1000/ws/secret.txt")
	b[len(b)-1] ^= 1
	mustPut(t, raw, "uid=1000/ws/secret.txt", b)
	refused("edited body", "uid=1000/ws/secret.txt", store.ErrCorrupt)
	// Body and the header's sha256 edited: the MAC no longer matches.
	sum := sha256.Sum256(b[store.SigHeaderLen:])
	copy(b[store.SigHeaderLen-64:store.SigHeaderLen-32], sum[:])
	mustPut(t, raw, "uid=1000/ws/secret.txt", b)
	refused("edited body and header", "uid=1000/ws/secret.txt", store.ErrUnsigned)

	// Replays of valid signed bytes under other keys.
	mustPut(t, st, "uid=1000/ws/f", []byte("owner 1000's file"))
	mustPut(t, raw, "uid=1001/ws/f", mustRaw(t, raw, "uid=1000/ws/f"))
	refused("object replayed under another owner", "uid=1001/ws/f", store.ErrUnsigned)
	mustPut(t, st, "hibernated/a/g1/meta.json", []byte(`{"owner":1000}`))
	mustPut(t, raw, "hibernated/b/g1/meta.json", mustRaw(t, raw, "hibernated/a/g1/meta.json"))
	refused("object replayed under another session", "hibernated/b/g1/meta.json", store.ErrUnsigned)
	lease, _, err := raw.Record(ctx, "hibernated/a/lease", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Swap(ctx, "hibernated/b/lease", "", lease); err != nil {
		t.Fatal(err)
	}
	refusedRecord("lease replayed under another session", "hibernated/b/lease")
	mustPut(t, raw, "hibernated/a/g1/manifest.json", lease)
	refused("record replayed as an object", "hibernated/a/g1/manifest.json", store.ErrUnsigned)
	mustPut(t, raw, "hibernated/c/lease", mustRaw(t, raw, "hibernated/a/g1/meta.json"))
	refusedRecord("unsigned record", "hibernated/c/lease")
	// And the genuine ones still read.
	if got, _, err := st.Record(ctx, "hibernated/a/lease", 100); err != nil || !strings.Contains(string(got), `"owner":1000`) {
		t.Fatalf("genuine lease: %q %v", got, err)
	}
}

// TestOpenRefusesSharedWithoutKey: a shared store with no fleet key is
// refused at start naming store.key_file, not trusted.
func TestOpenRefusesSharedWithoutKey(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AK")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SK")
	for _, o := range []store.Options{
		{URL: "file://" + t.TempDir(), Shared: true},
		{URL: "s3://bucket/p", S3: store.S3Options{Endpoint: "http://127.0.0.1:1"}},
	} {
		if _, err := store.Open(o); err == nil || !strings.Contains(err.Error(), "store.key_file") {
			t.Errorf("open %s shared without a key: %v, want a refusal naming store.key_file", o.URL, err)
		}
	}
	// A local, unshared file store needs none.
	if _, err := store.Open(store.Options{URL: "file://" + t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	kf := writeKeyFile(t, 0o600, "k1 "+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))+"\n")
	st, err := store.Open(store.Options{URL: "file://" + t.TempDir(), Shared: true, KeyFile: kf})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := store.Signer(st); !ok || n != "k1" {
		t.Fatalf("opened with a key file: signer %q %v", n, ok)
	}
}

func writeKeyFile(t *testing.T, mode os.FileMode, text string) string {
	p := filepath.Join(t.TempDir(), "store.keys")
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadKeyringRefuses(t *testing.T) {
	good := "k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) + "\n"
	if _, err := store.LoadKeyring(writeKeyFile(t, 0o640, good)); err != nil {
		t.Fatalf("0640 key file: %v", err)
	}
	for _, mode := range []os.FileMode{0o644, 0o660, 0o604} {
		if _, err := store.LoadKeyring(writeKeyFile(t, mode, good)); err == nil || !strings.Contains(err.Error(), "mode") {
			t.Errorf("mode %04o: %v, want a refusal naming the mode", mode, err)
		}
	}
	p := writeKeyFile(t, 0o600, good)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(p, link)
	if _, err := store.LoadKeyring(link); err == nil {
		t.Error("a symlinked key file was read")
	}
	if err := os.Chown(p, 1000, 1000); err == nil {
		if _, err := store.LoadKeyring(p); err == nil || !strings.Contains(err.Error(), "owned") {
			t.Errorf("another user's key file: %v", err)
		}
	}
}

// keyFileSeeds are shared by TestParseKeyring and FuzzParseKeyring.
var keyFileSeeds = []struct {
	text string
	ok   bool
}{
	{"k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)), true},
	{"# rotation: new first\nnew " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 48)) + "\nold " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)) + " # kept for reading\n", true},
	{"", false},
	{"# only a comment\n", false},
	{"k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16)), false}, // too short
	{"k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 65)), false}, // too long
	{"k1 not-base64!!", false}, // not base64
	{"k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)) + " x", false}, // 3 fields
	{"../k " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)), false},
	{"k1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)) + "\nk1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32)), false},
	{"a " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)) + "\nb " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)), false},
	{strings.Repeat("x", 40) + " " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)), false},
}

func TestParseKeyring(t *testing.T) {
	for _, c := range keyFileSeeds {
		k, err := store.ParseKeyring("f", []byte(c.text))
		if (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok=%v", c.text, err, c.ok)
		}
		if err != nil && strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))) {
			t.Errorf("%q: the error shows a secret: %v", c.text, err)
		}
		if err == nil && c.ok && strings.HasPrefix(c.text, "#") && k.Signer() != "new" {
			t.Errorf("signer %q, want the first key", k.Signer())
		}
	}
}

// FuzzParseKeyring: an accepted key file has 1-16 keys with valid names,
// the first the signer, and a secret never appears in an error.
func FuzzParseKeyring(f *testing.F) {
	for _, c := range keyFileSeeds {
		f.Add(c.text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		k, err := store.ParseKeyring("f", []byte(text))
		if err != nil {
			for _, field := range strings.Fields(text) {
				if len(field) >= 43 && strings.Contains(err.Error(), field) {
					t.Fatalf("error shows a field that may be a secret: %v", err)
				}
			}
			return
		}
		names := k.Names()
		if len(names) < 1 || len(names) > 16 || names[0] != k.Signer() {
			t.Fatalf("accepted %q with keys %v", text, names)
		}
		for _, n := range names {
			if n == "" || len(n) > 32 || strings.ContainsAny(n, "/\x00 ") {
				t.Fatalf("accepted key name %q", n)
			}
		}
	})
}
