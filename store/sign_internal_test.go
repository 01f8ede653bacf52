package store

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"
)

func testRing(t testing.TB) *Keyring {
	k, err := NewKeyring([2]string{"k1", strings.Repeat("s", 32)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestPAE: the signed message is DSSE's pre-authentication encoding.
func TestPAE(t *testing.T) {
	// DSSE's own example (protocol.md): PAE("http://example.com/HelloWorld", "hello world").
	want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"
	if got := string(pae("http://example.com/HelloWorld", []byte("hello world"))); got != want {
		t.Fatalf("pae: %q, want %q", got, want)
	}
}

// sigHeaderSeeds are shared by TestDecodeSigHeader and FuzzSigHeader.
func sigHeaderSeeds(t testing.TB) [][]byte {
	k := testRing(t)
	sum := sha256.Sum256([]byte("body"))
	good := k.header(kindObject, "uid=1/ws/f", 4, sum[:])
	bad := bytes.Clone(good)
	bad[len(sigMagic)] = 0 // empty name
	huge := bytes.Clone(good)
	huge[len(sigMagic)+sigNameLen] = 0xff
	return [][]byte{good, bad, huge, good[:10], nil, bytes.Repeat([]byte{0}, SigHeaderLen)}
}

func TestDecodeSigHeader(t *testing.T) {
	k := testRing(t)
	for i, b := range sigHeaderSeeds(t) {
		h, err := decodeSigHeader(b)
		if (err == nil) != (i == 0) {
			t.Fatalf("seed %d: %v", i, err)
		}
		if i == 0 {
			if err := k.verify(h, kindObject, "uid=1/ws/f", "test"); err != nil {
				t.Fatal(err)
			}
			for _, other := range []struct{ kind, key string }{{kindRecord, "uid=1/ws/f"}, {kindObject, "uid=2/ws/f"}} {
				if err := k.verify(h, other.kind, other.key, "test"); err == nil {
					t.Fatalf("header of uid=1/ws/f verified as %s %s", other.kind, other.key)
				}
			}
		}
	}
}

// FuzzSigHeader: the envelope decoder never panics, and a header passes
// verification only if it is byte for byte the one the key makes for
// that key, size and sum (no second encoding of a signature).
func FuzzSigHeader(f *testing.F) {
	for _, s := range sigHeaderSeeds(f) {
		f.Add(s, "uid=1/ws/f")
	}
	k := testRing(f)
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		h, err := decodeSigHeader(b)
		if err != nil {
			return
		}
		if len(h.sum) != sha256.Size || len(h.mac) != sha256.Size || h.size < 0 {
			t.Fatalf("decoded %+v", h)
		}
		if k.verify(h, kindObject, key, "fuzz") == nil && !bytes.Equal(b, k.header(kindObject, key, h.size, h.sum)) {
			t.Fatalf("a second encoding verified: %x", b)
		}
	})
}
