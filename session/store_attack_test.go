package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/store"
)

// fleetKeys is the fleet key every node of a test shares (store.key_file).
func fleetKeys(t testing.TB) *store.Keyring {
	k, err := store.NewKeyring([2]string{"fleet-test", strings.Repeat("f", 32)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// storeAttacker writes to a shared store as the store attacker did: with
// the store's credentials (or root on the box serving it), recomputing
// the store's own checksums, but without the fleet key.
type storeAttacker struct {
	read  func(key string) []byte
	write func(key string, b []byte)
}

// s3Attacker talks S3 to srv itself, setting the sha256 metadata the store
// checks to the sum of what it writes.
func s3Attacker(t *testing.T, srv *testenv.S3, prefix string) storeAttacker {
	c, err := minio.New(strings.TrimPrefix(srv.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(srv.Access, srv.Secret, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	return storeAttacker{
		read: func(key string) []byte {
			b, err := os.ReadFile(srv.ObjectPath(prefix + key))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		write: func(key string, b []byte) {
			sum := sha256.Sum256(b)
			if _, err := c.PutObject(context.Background(), srv.Bucket, prefix+key, bytes.NewReader(b), int64(len(b)),
				minio.PutObjectOptions{UserMetadata: map[string]string{"Sha256": hex.EncodeToString(sum[:])}}); err != nil {
				t.Fatalf("attacker's put of %s: %v", key, err)
			}
		},
	}
}

// fileAttacker writes a shared file store's files and their checksum
// xattrs.
func fileAttacker(t *testing.T, dir string) storeAttacker {
	return storeAttacker{
		read: func(key string) []byte {
			b, err := os.ReadFile(filepath.Join(dir, key))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		write: func(key string, b []byte) {
			p := filepath.Join(dir, key)
			os.MkdirAll(filepath.Dir(p), 0o700)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sum := sha256.Sum256(b)
			if err := store.SetFileSum(f, hex.EncodeToString(sum[:])); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// storeFixture is two nodes on one shared store, and the attacker's hand
// on the store.
type storeFixture struct {
	ra, rb *restartable
	cfg    func(node string) func(*Config)
	atk    storeAttacker
	dir    string // a file store's directory
}

func s3Fixture(t *testing.T) storeFixture {
	ra, rb, cfg, srv := twoNodes(t)
	return storeFixture{ra: ra, rb: rb, cfg: cfg, atk: s3Attacker(t, srv, "fleet/")}
}

func fileFixture(t *testing.T) storeFixture {
	requiresCriu(t)
	ra, rb := newRestartable(t), newRestartable(t)
	rb.isoMod = func(c *isolate.Config) {
		c.CgroupRoot = testCgroupRoot + "-b"
		c.UIDBase = 0x50000000
		c.Slots = 64
	}
	dir := t.TempDir()
	cfg := func(node string) func(*Config) {
		return func(c *Config) {
			st, err := store.Open(store.Options{URL: "file://" + dir, Shared: true, Keys: fleetKeys(t)})
			if err != nil {
				t.Fatal(err)
			}
			c.Store, c.NodeID = st, node
			c.MaxIdleTTL = time.Hour
		}
	}
	return storeFixture{ra: ra, rb: rb, cfg: cfg, atk: fileAttacker(t, dir), dir: dir}
}

// TestStoreAttacksRefused runs the store attacks against S3 (a real
// versitygw) and a shared file store: every object the attacker changes
// (with the store's checksums recomputed, without the fleet key) is
// refused naming it, nothing of it reaches the host, and what a node
// holding the key could still write is checked as input.
func TestStoreAttacksRefused(t *testing.T) {
	t.Run("s3", func(t *testing.T) { storeAttacks(t, s3Fixture(t)) })
	t.Run("file", func(t *testing.T) { storeAttacks(t, fileFixture(t)) })
}

func storeAttacks(top *testing.T, fx storeFixture) {
	// t is the running subtest: the helpers below fail that one.
	t := top
	sub := func(name string, f func()) {
		top.Run(name, func(st *testing.T) {
			t = st
			defer func() { t = top }()
			f()
		})
	}
	ctx := context.Background()
	cfgA := func(c *Config) { fx.cfg("na")(c); c.MaxIdleTTL = time.Hour }
	cfgB := func(c *Config) { fx.cfg("nb")(c); c.MaxIdleTTL = time.Hour }
	mA, id := criuDaemon(t, fx.ra, cfgA, "x = 41")
	defer mA.Shutdown(ctx)
	if _, err := mA.Durability().Hibernate(ctx, 1000, id); err != nil {
		t.Fatalf("Hibernate into the store: %v", err)
	}
	mB := fx.rb.startWith(cfgB)
	defer mB.Shutdown(ctx)

	atk := fx.atk
	gen := "hibernated/" + id + "/g1/"
	keys := []string{"hibernated/" + id + "/lease", gen + "manifest.json", gen + "meta.json", gen + "upper.tar", gen + "images/inventory.img"}
	orig := map[string][]byte{}
	for _, k := range keys {
		orig[k] = atk.read(k)
	}
	restore := func() {
		for _, k := range keys {
			atk.write(k, orig[k])
		}
	}
	body := func(k string) []byte { return bytes.Clone(orig[k][store.SigHeaderLen:]) }
	// editJSON rewrites a stored JSON object's fields, unsigned (the
	// attacker's bytes carry no signature header at all).
	editJSON := func(b []byte, f func(map[string]any)) []byte {
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		f(v)
		out, _ := json.Marshal(v)
		return out
	}
	// forgeMeta writes meta.json edited by f and a manifest that pins its
	// new sha256, as the store attacker did; sign: with the fleet key (a
	// node that holds it), else without.
	forgeMeta := func(f func(map[string]any), sign bool) {
		meta := editJSON(body(gen+"meta.json"), f)
		sum := sha256.Sum256(meta)
		man := editJSON(body(gen+"manifest.json"), func(m map[string]any) {
			o := m["objects"].([]any)[0].(map[string]any)
			o["size"], o["sha256"] = len(meta), hex.EncodeToString(sum[:])
		})
		if sign {
			for k, b := range map[string][]byte{gen + "meta.json": meta, gen + "manifest.json": man} {
				if _, err := mB.dur.objects.Put(ctx, k, bytes.NewReader(b), int64(len(b))); err != nil {
					t.Fatal(err)
				}
			}
			return
		}
		atk.write(gen+"meta.json", meta)
		atk.write(gen+"manifest.json", man)
	}
	nothingOnB := func() {
		t.Helper()
		if _, err := os.Stat(filepath.Join(fx.rb.state, "sessions", "sessions", id)); !os.IsNotExist(err) {
			t.Fatalf("node B kept a directory of the refused session: %v", err)
		}
		if ls := mB.List(ctx, 0); len(ls) != 0 {
			t.Fatalf("node B lists %+v after a refused take", ls)
		}
	}
	refusedUnsigned := func(what string, owner int) {
		t.Helper()
		_, err := mB.Lookup(ctx, owner, id)
		if err == nil || !strings.Contains(err.Error(), "not signed by the fleet key") {
			t.Fatalf("%s: take %v, want a refusal naming the fleet key", what, err)
		}
		t.Logf("%s: %v", what, err)
		nothingOnB()
	}

	// Row 1: a stored persist name of ../ repeated and an absolute path
	// made a cell write as root outside the store.
	escape := filepath.Join(t.TempDir(), "escaped")
	sub("Row1PersistTraversal", func() {
		forgeMeta(func(m map[string]any) { m["persist"] = strings.Repeat("../", 12) + strings.TrimPrefix(escape, "/") }, false)
		refusedUnsigned("persist name rewritten unsigned", 1000)
		// A node holding the key is held to a request's name check.
		forgeMeta(func(m map[string]any) { m["persist"] = strings.Repeat("../", 12) + strings.TrimPrefix(escape, "/") }, true)
		if _, err := mB.Lookup(ctx, 1000, id); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "persist name") {
			t.Fatalf("signed traversal persist name: %v, want unavailable naming the persist name", err)
		}
		nothingOnB()
		if _, err := os.Stat(escape); !os.IsNotExist(err) {
			t.Fatalf("something was written at the escaped path %s: %v", escape, err)
		}
		restore()
	})

	// Row 4: the owner of a hibernated session rewritten in the store
	// (lease and metadata, checksums recomputed): owner 1001 took 1000's.
	sub("Row4OwnerRewrite", func() {
		atk.write("hibernated/"+id+"/lease", editJSON(body("hibernated/"+id+"/lease"), func(m map[string]any) { m["owner"] = 1001 }))
		forgeMeta(func(m map[string]any) { m["owner"] = 1001 }, false)
		refusedUnsigned("owner rewritten", 1001)
		// Replayed: the genuine signed lease of this session moved under
		// another id is refused too (the key is in what is signed).
		atk.write("hibernated/other-"+id+"/lease", orig["hibernated/"+id+"/lease"])
		if _, err := mB.Lookup(ctx, 1000, "other-"+id); err == nil || !strings.Contains(err.Error(), "not signed by the fleet key") {
			t.Fatalf("lease replayed under another id: %v, want a refusal naming the fleet key", err)
		}
		restore()
	})

	// Row 5: a stored TTL of ten years was honoured past max_idle_ttl.
	sub("Row5TenYearTTL", func() {
		tenYears := float64(10 * 365 * 24 * time.Hour)
		forgeMeta(func(m map[string]any) { m["ttl"] = tenYears }, false)
		refusedUnsigned("ten-year TTL unsigned", 1000)
		// Signed by a node: clamped to this node's max_idle_ttl.
		forgeMeta(func(m map[string]any) { m["ttl"] = tenYears; m["created"] = time.Now().Add(10 * 365 * 24 * time.Hour) }, true)
		info, err := mB.Lookup(ctx, 1000, id)
		if err != nil {
			t.Fatalf("signed ten-year TTL: %v", err)
		}
		// Hibernated, it ends after sessions.hibernated_ttl (7 days), not
		// in ten years.
		if limit := time.Now().Add(mB.cfg.HibernatedTTL + time.Minute); info.ExpiresAt.After(limit) {
			t.Fatalf("taken with a ten-year TTL: expires %s", info.ExpiresAt)
		}
		s, err := mB.get(1000, id)
		if err != nil || s.ttl > time.Hour || s.created.After(time.Now()) {
			t.Fatalf("taken session: ttl %s created %s (%v), want at most 1h and not in the future", s.ttl, s.created, err)
		}
		// Back to the store for the next rows.
		res, err := mB.Exec(ctx, 1000, id, ExecRequest{Code: "print(x)"})
		if err != nil || strings.TrimSpace(res.Stdout) != "41" {
			t.Fatalf("the taken session: %v %+v", err, res)
		}
		// Awake, its idle timeout is the clamped one.
		if info, err := mB.Lookup(ctx, 1000, id); err != nil || info.ExpiresAt.After(time.Now().Add(time.Hour+time.Minute)) {
			t.Fatalf("awake with a ten-year TTL: expires %v (%v), past max_idle_ttl (1h)", info, err)
		}
		if _, err := mB.Durability().Hibernate(ctx, 1000, id); err != nil {
			t.Fatalf("hibernate again: %v", err)
		}
		gen = "hibernated/" + id + "/g2/"
		keys = []string{"hibernated/" + id + "/lease", gen + "manifest.json", gen + "meta.json", gen + "upper.tar", gen + "images/inventory.img"}
		for _, k := range keys {
			orig[k] = atk.read(k)
		}
	})

	// Row 2's store side and item 1: an image or the saved files changed
	// behind the store's back is refused, and nothing of them is used.
	sub("TamperedImageAndUpper", func() {
		for _, k := range []string{gen + "images/inventory.img", gen + "upper.tar"} {
			// Whole object re-signed by nobody, checksums and manifest
			// recomputed: the manifest's signature fails first.
			b := body(k)
			b[len(b)/2] ^= 0xff
			sum := sha256.Sum256(b)
			name := strings.TrimPrefix(k, gen)
			man := editJSON(body(gen+"manifest.json"), func(m map[string]any) {
				for _, o := range m["objects"].([]any) {
					if o := o.(map[string]any); o["name"] == name {
						o["size"], o["sha256"] = len(b), hex.EncodeToString(sum[:])
					}
				}
			})
			atk.write(k, b)
			atk.write(gen+"manifest.json", man)
			refusedUnsigned(name+" and manifest rewritten", 1000)
			// The signed header kept, the body changed (its store checksum
			// recomputed): found at its end, after the tar was unpacked;
			// what was written goes.
			atk.write(gen+"manifest.json", orig[gen+"manifest.json"])
			atk.write(k, append(bytes.Clone(orig[k][:store.SigHeaderLen]), b...))
			// (A tar cut short by the change may fail unpacking first.)
			if _, err := mB.Lookup(ctx, 1000, id); !errors.Is(err, ErrUnavailable) || name != "upper.tar" && !strings.Contains(err.Error(), "sha256") {
				t.Fatalf("%s changed under its signature: %v, want unavailable naming the sha256", name, err)
			}
			nothingOnB()
			restore()
		}
	})

	// The genuine session still moves: the refusals above were not a
	// store that refuses everything.
	res, err := mB.Exec(ctx, 1000, id, ExecRequest{Code: "print(x + 1)"})
	if err != nil || strings.TrimSpace(res.Stdout) != "42" {
		t.Fatalf("the genuine session on node B: %v %+v", err, res)
	}
}

// TestStoreRow3LiveLeaseNotReplaced: owner 1001 reads
// owner 1000's live lease from the store, rewrites it as 1001's and
// hibernated, and asks the node running the session for its id. The
// rewrite is refused for its signature; and even signed (a node holding
// the key), a store record never replaces a session this node runs: 1001
// is told not found, 1000 keeps the session.
func TestStoreRow3LiveLeaseNotReplaced(t *testing.T) {
	for _, c := range []struct {
		name string
		fx   func(*testing.T) storeFixture
	}{{"s3", s3Fixture}, {"file", fileFixture}} {
		t.Run(c.name, func(t *testing.T) {
			fx := c.fx(t)
			ctx := context.Background()
			mA, id := criuDaemon(t, fx.ra, fx.cfg("na"), "x = 41")
			defer mA.Shutdown(ctx)
			lk := "hibernated/" + id + "/lease"
			deadline := time.Now().Add(10 * time.Second)
			var lease []byte
			for { // recordLive writes it in the background
				if b, _, err := mA.dur.objects.Record(ctx, lk, 1<<16); err == nil {
					lease = b
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no live lease in the store")
				}
				time.Sleep(50 * time.Millisecond)
			}
			var l map[string]any
			json.Unmarshal(lease, &l)
			l["owner"], l["state"], l["gen"] = 1001, leaseHib, 1
			forged, _ := json.Marshal(l)

			check := func(what string) {
				t.Helper()
				if _, err := mA.Lookup(ctx, 1001, id); !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUnavailable) {
					t.Fatalf("%s: owner 1001's lookup: %v, want refused", what, err)
				}
				if ls := mA.List(ctx, 1001); len(ls) != 0 {
					t.Fatalf("%s: owner 1001 lists %+v", what, ls)
				}
				res, err := mA.Exec(ctx, 1000, id, ExecRequest{Code: "x += 1\nprint(x)"})
				if err != nil || res.Status != StatusOK {
					t.Fatalf("%s: owner 1000's session after the forged lease: %v %+v", what, err, res)
				}
			}
			fx.atk.write(lk, forged)
			if _, _, err := mA.dur.objects.Record(ctx, lk, 1<<16); !errors.Is(err, store.ErrUnsigned) {
				t.Fatalf("forged lease read back: %v, want ErrUnsigned", err)
			}
			check("unsigned forged lease")
			// Signed by a node that holds the key: still not an order.
			if err := mA.dur.objects.Delete(ctx, lk); err != nil {
				t.Fatal(err)
			}
			if _, err := mA.dur.objects.Swap(ctx, lk, "", forged); err != nil {
				t.Fatal(err)
			}
			check("signed forged lease")
		})
	}
}
