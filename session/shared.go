package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/store"
)

// Hibernated sessions in a shared store. With a shared Config.Store (S3,
// or a file store marked shared), a hibernation goes on from the local
// checkpoint: the images, the saved upper layer (one tar) and the session
// metadata are uploaded under hibernated/<id>/g<gen>/, a manifest listing
// each object's size and sha256 is written last, and the session's lease
// record (hibernated/<id>/lease) is swapped to {state: hibernated, gen}.
// The node then forgets the session. Any node using the store (this one
// included) that gets a request for an id it does not hold reads the
// lease, swaps it to {state: live, node: itself} and only then downloads
// the generation, verifies it against the manifest, rebuilds a disk from
// it (as after a reboot: ReplaceDisk, LoadUpper, the user namespace moved
// at restore) and serves the session as hibernated; its next cell wakes it.
//
// The lease is the one point two nodes race on: on S3 the swap is a
// conditional PUT (If-Match on the version read, If-None-Match: * to
// create), which S3 (since 2024) and versitygw evaluate atomically per
// key, so exactly one of two takers wins and the other is refused. A file
// store takes an flock around the compare and write (one host or NFS).
// A live lease never expires: a node that dies holding a live session
// loses it (as its kernel is gone with it), and the record says which node
// it was. A taker that fails after winning gives the lease back. A
// hibernated lease older than sessions.hibernated_ttl is expired by any
// node's janitor (sweepStored): swapped to {state: expired} first, so a
// taker and a sweeper cannot both win, then removed with its objects.

const (
	leaseVersion = 1
	leaseHib     = "hibernated"
	leaseLive    = "live"
	leaseExpired = "expired"
	// maxSweepObjects bounds one sweep's listing of hibernated/ (about
	// 200 bytes each in memory); a store holding more is swept by its own
	// lifecycle rules, and the sweep says so.
	maxSweepObjects = 200_000
	// expiredGrace is how long an expired lease may stand before any node
	// finishes the removal (its sweeper died midway).
	expiredGrace = time.Hour
	// maxManifest bounds a manifest read from the store.
	maxManifest = 1 << 20
	// maxMeta bounds a session's metadata read from the store.
	maxMeta = 1 << 20
	// maxImageFiles bounds a checkpoint's image files.
	maxImageFiles = 10_000
)

// lease is a session's ownership record in a shared store.
type lease struct {
	Version int       `json:"version"`
	ID      string    `json:"id"`
	Owner   int       `json:"owner"`
	Node    string    `json:"node"`
	State   string    `json:"state"`
	Gen     int       `json:"gen"`
	At      time.Time `json:"at"`
}

// manifest lists a generation's objects; written last, read first.
type manifest struct {
	Version int              `json:"version"`
	ID      string           `json:"id"`
	Gen     int              `json:"gen"`
	Objects []manifestObject `json:"objects"`
}

type manifestObject struct {
	Name   string `json:"name"` // meta.json, upper.tar, images/<file>
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

var (
	storedIDRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	imageFileRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	errNotStored = errors.New("not in the shared store")
)

func leaseKey(id string) string           { return "hibernated/" + id + "/lease" }
func genPrefix(id string, gen int) string { return "hibernated/" + id + "/g" + strconv.Itoa(gen) + "/" }

// shared says whether hibernated sessions live in the store.
func (m *durable) shared() bool { return m.objects != nil && m.cfg.Store.Shared() }

// storeErr maps a store error to the session sentinel it is, naming what
// was being done; a store that is down is ErrUnavailable naming it.
func storeErr(what string, err error) error {
	switch {
	case errors.Is(err, store.ErrQuota), errors.Is(err, store.ErrTooLarge):
		return fmt.Errorf("%w: %s: %w", ErrStoreQuota, what, err)
	case errors.Is(err, store.ErrBadKey):
		return fmt.Errorf("%w: %s: %w", ErrBadRequest, what, err)
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %s: %w", ErrNotFound, what, err)
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("%w: %s: %w", ErrBusy, what, err)
	}
	// ErrUnavailable and ErrCorrupt: the store cannot give it back now.
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
}

// exportHibernated uploads s, hibernated here, to the shared store and
// makes the store its home; the caller holds s.run and forgets s locally
// on success. On failure s stays hibernated on this node.
func (m *durable) exportHibernated(ctx context.Context, s *Session) error {
	st := m.objects
	what := fmt.Sprintf("hibernate session %s into store %s (it stays hibernated on this node)", s.id, st.Name())
	if !storedIDRE.MatchString(s.id) {
		return fmt.Errorf("%w: %s: id %q cannot be a store key", ErrBadRequest, what, s.id)
	}
	s.mu.Lock()
	oldVer := s.lease
	s.mu.Unlock()
	gen := 1
	cur, ver, err := m.readLease(ctx, s.id)
	switch {
	case errors.Is(err, errNotStored):
		ver = ""
	case err != nil:
		return storeErr(what, err)
	default:
		// Ours if this node holds it: at the version it last wrote, or
		// live here (a session re-adopted after a restart does not know
		// the version its create wrote).
		if cur.Node != m.node() || (ver != oldVer && cur.State != leaseLive) {
			return fmt.Errorf("%w: %s: its lease in the store is held by node %q (state %s) now", ErrBusy, what, cur.Node, cur.State)
		}
		gen = cur.Gen + 1
	}
	prefix := genPrefix(s.id, gen)
	var man manifest
	man.Version, man.ID, man.Gen = leaseVersion, s.id, gen
	put := func(name string, r io.Reader, size int64) error {
		obj, err := st.Put(ctx, prefix+name, r, size)
		if err != nil {
			return err
		}
		man.Objects = append(man.Objects, manifestObject{Name: name, Size: obj.Size, SHA256: obj.SHA256})
		return nil
	}
	// The metadata first: a reader needs the policy to bound the rest.
	meta, err := os.ReadFile(filepath.Join(s.dir, metaName))
	if err != nil {
		if err := m.saveMeta(s); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if meta, err = os.ReadFile(filepath.Join(s.dir, metaName)); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := put("meta.json", bytes.NewReader(meta), int64(len(meta))); err != nil {
		return storeErr(what, err)
	}
	images := filepath.Join(s.dir, imagesName)
	ents, err := os.ReadDir(images)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !imageFileRE.MatchString(e.Name()) {
			continue
		}
		if err := m.putFile(put, "images/"+e.Name(), filepath.Join(images, e.Name())); err != nil {
			return storeErr(what, err)
		}
	}
	if err := m.putUpper(put, s); err != nil {
		if errors.Is(err, ErrLimit) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return storeErr(what, err)
	}
	mb, _ := json.Marshal(man)
	if _, err := st.Put(ctx, prefix+"manifest.json", bytes.NewReader(mb), int64(len(mb))); err != nil {
		return storeErr(what, err)
	}
	// A close that came during the upload ends the session here: its
	// lease must not then name a hibernation any node could take (it came
	// back from the store after it was closed).
	isClosed := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closed
	}
	if isClosed() {
		m.dropGen(s.id, gen)
		return fmt.Errorf("%w: session %s was closed", ErrNotFound, s.id)
	}
	l := lease{Version: leaseVersion, ID: s.id, Owner: s.owner, Node: m.node(), State: leaseHib, Gen: gen, At: time.Now().UTC()}
	lb, _ := json.Marshal(l)
	if _, err := st.Swap(ctx, leaseKey(s.id), ver, lb); err != nil {
		m.dropGen(s.id, gen)
		return storeErr(what, err)
	}
	if isClosed() {
		m.dropStored(s.id) // closed as the lease was written
		return fmt.Errorf("%w: session %s was closed", ErrNotFound, s.id)
	}
	if gen > 1 {
		m.dropGen(s.id, gen-1)
	}
	m.log().Info("hibernated session stored", "session", s.id, "store", st.Name(), "gen", gen, "objects", len(man.Objects))
	return nil
}

// putFile uploads the host file p as name.
func (m *durable) putFile(put func(string, io.Reader, int64) error, name, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return put(name, f, fi.Size())
}

// upperTarMax bounds a saved upper layer's tar, stored and taken back
// alike: dense (sparse files in full), at 2x the disk plus room for
// headers; the file data inside is bounded at the disk itself.
func upperTarMax(diskBytes int64) int64 { return 2*diskBytes + 64<<20 }

// putUpper uploads s's saved upper layer as one tar, written to a
// temporary file first (its checksum precedes its upload on S3).
func (m *durable) putUpper(put func(string, io.Reader, int64) error, s *Session) error {
	tmp, err := os.CreateTemp(s.dir, "upper-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := tarTree(filepath.Join(s.dir, savedName), tmp, s.policy.DiskBytes); err != nil {
		return err
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	// A tar no node would take back is never stored: the session stays
	// here, hibernated, instead of being handed to the store and then
	// refused by every take (tar headers count against no disk: tens of
	// thousands of empty files made one past the import's bound).
	if max := upperTarMax(s.policy.DiskBytes); size > max {
		return fmt.Errorf("%w: the saved files make a tar of %d bytes, over the %d a node takes back for a %d-byte disk (many small files: each costs about 1.5 KiB of headers)", ErrLimit, size, max, s.policy.DiskBytes)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return put("upper.tar", tmp, size)
}

// dropGen removes a generation's objects, in the background and bounded:
// what is left over is garbage no lease points at.
func (m *durable) dropGen(id string, gen int) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		objs, err := m.objects.List(ctx, genPrefix(id, gen), maxImageFiles+16)
		if err != nil {
			return
		}
		for _, o := range objs {
			_ = m.objects.Delete(ctx, o.Key)
		}
	}()
}

// dropStored removes session id from the shared store (it was closed or
// expired on this node, which held its lease).
func (m *durable) dropStored(id string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if l, _, err := m.readLease(ctx, id); err != nil || l.Node != m.node() {
			return
		}
		_ = m.removeStored(ctx, id)
	}()
}

// removeStored deletes session id's objects from the store, its lease
// last: a removal cut short leaves a lease that says where it stood.
func (m *durable) removeStored(ctx context.Context, id string) error {
	objs, err := m.objects.List(ctx, "hibernated/"+id+"/", 4*maxImageFiles)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, "/lease") {
			if err := m.objects.Delete(ctx, o.Key); err != nil {
				return err
			}
		}
	}
	return m.objects.Delete(ctx, leaseKey(id))
}

// sweepStored expires the sessions hibernated in the shared store more
// than HibernatedTTL before now, as a node's janitor ends its own
// hibernated sessions: a node forgets a session it hibernates into the
// store, so no node's table would ever count it down. Any node may expire
// any session; the lease swap to expired decides against a taker, which
// then finds it expired. It also finishes removals an earlier sweeper left
// (an expired lease older than expiredGrace). It returns the ids it
// removed.
func (m *durable) sweepStored(ctx context.Context, now time.Time) ([]string, error) {
	objs, err := m.objects.List(ctx, "hibernated/", maxSweepObjects)
	if err != nil {
		return nil, fmt.Errorf("sweep store %s for hibernated sessions past sessions.hibernated_ttl (%s): %w", m.objects.Name(), m.cfg.HibernatedTTL, err)
	}
	var out []string
	for _, o := range objs {
		id, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, "hibernated/"), "/lease")
		if !ok || !storedIDRE.MatchString(id) {
			continue
		}
		l, ver, err := m.readLease(ctx, id)
		if err != nil {
			continue // gone meanwhile, or not a lease this version reads: left alone
		}
		switch {
		case l.State == leaseHib && now.Sub(l.At) > m.cfg.HibernatedTTL:
			if err := m.expireStored(ctx, l, ver, now); err != nil {
				if !errors.Is(err, store.ErrConflict) {
					m.log().Warn("expire session in the store", "session", id, "store", m.objects.Name(), "err", err)
				}
				continue // taken meanwhile: it is a live session now
			}
		case l.State == leaseExpired && now.Sub(l.At) > expiredGrace:
			if err := m.removeStored(ctx, id); err != nil {
				m.log().Warn("finish removing an expired session from the store", "session", id, "store", m.objects.Name(), "err", err)
				continue
			}
		default:
			continue
		}
		out = append(out, id)
	}
	return out, nil
}

// expireStored swaps l (read at version ver) to expired, and on winning
// removes the session from the store; ErrConflict if the lease changed.
func (m *durable) expireStored(ctx context.Context, l lease, ver string, now time.Time) error {
	e := l
	e.Node, e.State, e.At = m.node(), leaseExpired, now.UTC()
	b, _ := json.Marshal(e)
	if _, err := m.objects.Swap(ctx, leaseKey(l.ID), ver, b); err != nil {
		return err
	}
	m.log().Info("session expired in the store", "session", l.ID, "store", m.objects.Name(),
		"hibernated_at", l.At.Format(time.RFC3339), "hibernated_ttl", m.cfg.HibernatedTTL.String())
	return m.removeStored(ctx, l.ID)
}

// readLease reads session id's lease and its version; errNotStored if
// there is none.
func (m *durable) readLease(ctx context.Context, id string) (lease, string, error) {
	var l lease
	b, ver, err := m.objects.Record(ctx, leaseKey(id), 64<<10)
	if errors.Is(err, store.ErrNotFound) {
		return l, "", errNotStored
	}
	if err != nil {
		return l, "", err
	}
	// A live lease written at create (recordLive) has no generation yet.
	if err := json.Unmarshal(b, &l); err != nil || l.Version != leaseVersion || l.ID != id || (l.Gen < 1 && l.State != leaseLive) || l.Gen < 0 {
		return l, "", fmt.Errorf("%w: lease of session %s in %s is not one this version reads", store.ErrCorrupt, id, m.objects.Name())
	}
	return l, ver, nil
}

// forgetStored lets go of s after it was stored: its disk and directory
// go, it leaves the session table; the store is its home now.
func (m *Manager) forgetStored(s *Session) {
	m.mu.Lock()
	if m.sessions[s.id] == s {
		delete(m.sessions, s.id)
	}
	m.mu.Unlock()
	s.mu.Lock()
	s.lease = ""
	s.mu.Unlock()
	if err := m.destroy(s); err != nil {
		m.log().Warn("remove stored session's local copy", "session", s.id, "err", err)
	}
}

// Lookup returns session id of owner (0: any owner), taking it from the
// shared store if this node does not hold it: the entry point of a node
// that gets a request for a session another node hibernated. The taken
// session is hibernated here; its next cell (or Restore) wakes it.
func (m *Manager) Lookup(ctx context.Context, owner int, id string) (*Info, error) {
	s, err := m.lookup(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	info := m.infoOf(s)
	return &info, nil
}

// lookup is find, refusing a session past its max lifetime (ErrExpired):
// no request runs on one, whether the janitor ended it yet or not.
func (m *Manager) lookup(ctx context.Context, owner int, id string) (*Session, error) {
	s, err := m.find(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if err := m.pastLife(s, time.Now()); err != nil {
		return nil, err
	}
	return s, nil
}

// find is get, falling back to the shared store.
func (m *Manager) find(ctx context.Context, owner int, id string) (*Session, error) {
	s, err := m.get(owner, id)
	if err == nil || !errors.Is(err, ErrNotFound) || !m.dur.shared() {
		return s, err
	}
	terr := m.take(ctx, owner, id)
	if errors.Is(terr, errNotStored) {
		return nil, err
	}
	if terr != nil {
		return nil, terr
	}
	return m.get(owner, id)
}

// takeLocks holds a channel for each session being taken from the
// shared store, closed when its take ends.
type takeLocks struct {
	mu     sync.Mutex
	taking map[string]chan struct{}
}

// lock waits, as long as ctx allows, until no other take of id runs here,
// and makes this one the take of id. Takes of other ids go on side by
// side: one lock for all held every lookup of an id this node does not
// hold, a mistyped one included, behind another owner's download of a
// large session.
func (t *takeLocks) lock(ctx context.Context, id string) (unlock func(), err error) {
	for {
		t.mu.Lock()
		ch, busy := t.taking[id]
		if !busy {
			if t.taking == nil {
				t.taking = map[string]chan struct{}{}
			}
			ch = make(chan struct{})
			t.taking[id] = ch
			t.mu.Unlock()
			return func() {
				t.mu.Lock()
				delete(t.taking, id)
				t.mu.Unlock()
				close(ch)
			}, nil
		}
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: session %s is being taken from the store by another request: %v", ErrUnavailable, id, ctx.Err())
		}
	}
}

// running is how many takes run here.
func (t *takeLocks) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.taking)
}

// take makes session id, hibernated in the shared store, this node's.
func (m *Manager) take(ctx context.Context, owner int, id string) error {
	if !storedIDRE.MatchString(id) {
		return errNotStored
	}
	unlock, err := m.takes.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := m.get(owner, id); err == nil {
		return nil // taken while this one waited
	}
	if err := m.heldHere(id); err != nil {
		return err
	}
	closedAt, closed := m.closed.has(id, time.Now())
	st := m.dur.objects
	l, ver, err := m.dur.readLease(ctx, id)
	if err != nil {
		if closed || errors.Is(err, errNotStored) {
			return errNotStored // the closed id's owner is not known: as if there were none
		}
		return storeErr(fmt.Sprintf("look up session %s in store %s", id, st.Name()), err)
	}
	if owner != 0 && l.Owner != owner {
		return errNotStored // another user's: as if there were none
	}
	if closed {
		// Whatever the store says now: its objects may have been put
		// back. Said only to its owner (the lease names it): to another,
		// when it was closed would tell that it was.
		m.log().Warn("a request names a session this node closed: not taken from the store, whatever it holds",
			"session", id, "store", st.Name(), "closed_at", closedAt.Format(time.RFC3339))
		return fmt.Errorf("%w: session %s was closed on this node at %s", ErrNotFound, id, closedAt.Format(time.RFC3339))
	}
	if l.State == leaseExpired {
		return fmt.Errorf("%w: session %s expired in store %s: hibernated there longer than sessions.hibernated_ttl (%s); being removed since %s",
			ErrNotFound, id, st.Name(), m.cfg.HibernatedTTL, l.At.Format(time.RFC3339))
	}
	if l.State != leaseHib {
		// A fleet's proxy sends a session's requests elsewhere only when
		// its node is down: a session live there and not hibernated into
		// the store went with that node's kernel (ErrLost); its persisted
		// files are still in the store.
		return fmt.Errorf("%w: session %s was live on node %q since %s and is not hibernated in store %s: lost if that node is down (its persisted files remain), else ask that node",
			ErrLost, id, l.Node, l.At.Format(time.RFC3339), st.Name())
	}
	if now := time.Now(); now.Sub(l.At) > m.cfg.HibernatedTTL {
		// What sweepStored would expire: never restored, whichever node
		// sweeps first (a lease put back after its removal is one).
		if err := m.dur.expireStored(ctx, l, ver, now); err != nil && !errors.Is(err, store.ErrConflict) {
			m.log().Warn("expire session in the store", "session", id, "store", st.Name(), "err", err)
		}
		return fmt.Errorf("%w: session %s expired in store %s: hibernated there since %s, longer than sessions.hibernated_ttl (%s)",
			ErrNotFound, id, st.Name(), l.At.Format(time.RFC3339), m.cfg.HibernatedTTL)
	}
	// The other takes running here count: each may become one.
	others := m.takes.running() - 1
	if n := m.hibernatedCount() + others; n >= m.cfg.MaxHibernated {
		return fmt.Errorf("%w: %d hibernated sessions, the configured maximum (sessions.max_hibernated)", ErrLimit, n)
	}
	mine := l
	mine.Node, mine.State, mine.At = m.dur.node(), leaseLive, time.Now().UTC()
	mb, _ := json.Marshal(mine)
	nv, err := st.Swap(ctx, leaseKey(id), ver, mb)
	if errors.Is(err, store.ErrConflict) {
		winner := "another node"
		if w, _, err := m.dur.readLease(ctx, id); err == nil {
			winner = fmt.Sprintf("node %q", w.Node)
		}
		return fmt.Errorf("%w: session %s was taken from store %s by %s first", ErrNotFound, id, st.Name(), winner)
	}
	if err != nil {
		return storeErr(fmt.Sprintf("take session %s from store %s", id, st.Name()), err)
	}
	s, err := m.dur.importStored(ctx, l)
	if errors.Is(err, ErrExpired) {
		// Past its max lifetime: never restored, and removed from the
		// store (this node holds its lease now); the id answers expired.
		var ee *expiredError
		if errors.As(err, &ee) {
			m.ended.add(id, l.Owner, ee.why, ErrExpired)
		}
		m.log().Info("session past its max lifetime in the store: not restored, removed", "session", id, "store", st.Name(), "err", err)
		m.dur.dropStored(id)
		m.metrics.expired()
		return err
	}
	if err != nil {
		// Give it back for another node (or a later try).
		lb, _ := json.Marshal(l)
		if _, gerr := st.Swap(context.WithoutCancel(ctx), leaseKey(id), nv, lb); gerr != nil {
			m.log().Warn("give back the lease of a session not taken", "session", id, "err", gerr)
		}
		return err
	}
	s.lease = nv
	m.mu.Lock()
	if held, ok := m.sessions[id]; ok {
		// Created here meanwhile (ids carry this node's name): the local
		// session stays, the imported copy goes and the lease is given back.
		m.mu.Unlock()
		m.log().Error("a store record names a session this node runs: refused, the local session is kept",
			"session", id, "store", st.Name(), "local_owner", held.owner, "record_owner", l.Owner, "record_node", l.Node)
		// Only its disk goes: its directory is the local session's path,
		// and destroy would end the session in the store too.
		if derr := s.disk.Destroy(); derr != nil {
			m.log().Warn("remove a refused import's disk", "session", id, "err", derr)
		}
		lb, _ := json.Marshal(l)
		if _, gerr := st.Swap(context.WithoutCancel(ctx), leaseKey(id), nv, lb); gerr != nil {
			m.log().Warn("give back the lease of a session not taken", "session", id, "err", gerr)
		}
		return errNotStored
	}
	m.sessions[id] = s
	m.mu.Unlock()
	m.log().Info("session taken from the store", "session", id, "store", st.Name(), "from_node", l.Node, "gen", l.Gen)
	return nil
}

// heldHere refuses to take session id from the store if this node's table
// has it under any owner. A store record is never an order to replace a
// session this node runs: an attack had owner B rewrite A's live lease as
// B's and ask for A's id; the take replaced A's table entry (and removed
// its directory), and A's sandbox ran on with no session holding it. The
// requester sees what any other owner's id looks like (not found); the
// conflict is logged.
func (m *Manager) heldHere(id string) error {
	m.mu.Lock()
	held, ok := m.sessions[id]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	m.log().Error("a request for a session this node runs under another owner would take it from the store: refused, the local session is kept",
		"session", id, "store", m.dur.objects.Name(), "local_owner", held.owner)
	return errNotStored
}

// importStored downloads generation l.Gen of session l.ID, verified,
// into a new session directory and rebuilds its disk.
func (m *durable) importStored(ctx context.Context, l lease) (_ *Session, retErr error) {
	st := m.objects
	id := l.ID
	what := fmt.Sprintf("restore session %s from store %s", id, st.Name())
	prefix := genPrefix(id, l.Gen)
	mb, err := store.ReadAll(ctx, st, prefix+"manifest.json", maxManifest)
	if err != nil {
		return nil, storeErr(what, err)
	}
	var man manifest
	if err := json.Unmarshal(mb, &man); err != nil || man.Version != leaseVersion || man.ID != id || man.Gen != l.Gen ||
		len(man.Objects) < 2 || len(man.Objects) > maxImageFiles+2 || man.Objects[0].Name != "meta.json" {
		return nil, fmt.Errorf("%w: %s: its manifest is not one this version reads", ErrUnavailable, what)
	}
	dir := filepath.Join(m.cfg.StateDir, "sessions", id)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(dir)
			m.stateQuota.release(dir)
		}
	}()
	get := func(o manifestObject, max int64, w io.Writer) error {
		if o.Size > max {
			return fmt.Errorf("%w: %s is %d bytes, more than the %d allowed", store.ErrTooLarge, o.Name, o.Size, max)
		}
		rc, obj, err := st.Get(ctx, prefix+o.Name, o.Size)
		if err != nil {
			return err
		}
		defer rc.Close()
		// The object's own checksum is checked by the store's reader; the
		// manifest's pins it to this generation.
		if obj.SHA256 != o.SHA256 || obj.Size != o.Size {
			return fmt.Errorf("%w: %s does not match the manifest", store.ErrCorrupt, o.Name)
		}
		_, err = io.Copy(w, rc)
		return err
	}
	var metaBuf bytes.Buffer
	if err := get(man.Objects[0], maxMeta, &metaBuf); err != nil {
		return nil, storeErr(what, err)
	}
	var meta sessionMeta
	if err := json.Unmarshal(metaBuf.Bytes(), &meta); err != nil || meta.Version != metaVersion || meta.ID != id || meta.Owner != l.Owner {
		return nil, fmt.Errorf("%w: %s: its metadata is of another layout or session", ErrUnavailable, what)
	}
	// Every stored field is input: the persist name goes through a
	// request's check (before the fix: "../../<abs path>" made cells write as
	// root outside the store); the lifetimes are clamped by
	// hibernatedSession.
	if meta.Persist != "" && !persistNameRE.MatchString(meta.Persist) {
		return nil, fmt.Errorf("%w: %s: its persist name %q is not one a request could give (1-64 of [A-Za-z0-9._-], not starting with '.')", ErrUnavailable, what, trunc(meta.Persist))
	}
	if meta.Owner < 0 {
		return nil, fmt.Errorf("%w: %s: owner %d", ErrUnavailable, what, meta.Owner)
	}
	// Before any image is downloaded: a session past its lifetime is
	// never restored (hibernation does not stretch it).
	if err := m.mgr.metaPastLife(meta, time.Now()); err != nil {
		return nil, err
	}
	if err := m.storedPolicyOK(meta.Policy); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
	}
	if err := os.WriteFile(filepath.Join(dir, metaName), metaBuf.Bytes(), 0o600); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	images := filepath.Join(dir, imagesName)
	if err := os.Mkdir(images, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := m.reserveImages(&Session{id: id, policy: meta.Policy}, images); err != nil {
		return nil, err
	}
	imgLeft := imagesReserve(meta.Policy)
	seen := map[string]bool{}
	upper := false
	for _, o := range man.Objects[1:] {
		if seen[o.Name] {
			return nil, fmt.Errorf("%w: %s: %s twice in its manifest", ErrUnavailable, what, o.Name)
		}
		seen[o.Name] = true
		switch name, isImage := strings.CutPrefix(o.Name, "images/"); {
		case isImage && imageFileRE.MatchString(name):
			f, err := os.OpenFile(filepath.Join(images, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			err = get(o, imgLeft, f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, storeErr(what, err)
			}
			imgLeft -= o.Size
		case o.Name == "upper.tar":
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() {
				err := untarTree(pr, filepath.Join(dir, savedName), meta.Policy.DiskBytes)
				pr.CloseWithError(err)
				done <- err
			}()
			err := get(o, upperTarMax(meta.Policy.DiskBytes), pw)
			pw.CloseWithError(err)
			uerr := <-done
			if err != nil {
				return nil, storeErr(what, err)
			}
			if uerr != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, what, uerr)
			}
			// On this node's disk now, as a hibernation's saved files are:
			// charged to the state quota (it was charged to nothing until
			// a restart, so taking many sessions over passed the quota).
			saved := filepath.Join(dir, savedName)
			if err := m.stateQuota.charge(saved, allocatedBytes(saved)); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			upper = true
		default:
			return nil, fmt.Errorf("%w: %s: unexpected object %q in its manifest", ErrUnavailable, what, trunc(o.Name))
		}
	}
	if !upper {
		return nil, fmt.Errorf("%w: %s: no saved files in its manifest", ErrUnavailable, what)
	}
	if err := m.settleImages(&Session{id: id, policy: meta.Policy}, images); err != nil {
		return nil, err
	}
	disk, err := m.rebuildDisk(meta, dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := os.WriteFile(filepath.Join(dir, hibernatedMark), []byte(time.Now().UTC().Format(time.RFC3339)), 0o600); err != nil {
		_ = disk.Destroy()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return m.hibernatedSession(meta, dir, disk), nil
}

// storedPolicyOK checks a policy read from the store against this node's:
// a store is outside the sandbox but can be written by others, so a
// policy from it may be as strict as the configured one of its name, or
// stricter (a create's limits), never looser.
func (m *durable) storedPolicyOK(p policy.Policy) error {
	base, ok := m.cfg.Policies[p.Name]
	if !ok {
		return fmt.Errorf("policy %q is not configured on this node", p.Name)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	maxTimeout := max(base.MaxTimeout, base.Timeout)
	for _, c := range []struct {
		field string
		ok    bool
	}{
		{"memory_bytes", p.MemoryBytes <= base.MemoryBytes},
		{"pids", p.Pids <= base.Pids},
		{"cpus", p.CPUs <= base.CPUs},
		{"disk_bytes", p.DiskBytes <= base.DiskBytes},
		{"disk_inodes", p.DiskInodes <= base.DiskInodes},
		{"tmp_bytes", p.TmpBytes <= base.TmpBytes},
		{"open_files", p.OpenFiles <= base.OpenFiles},
		{"timeout", p.Timeout <= maxTimeout},
		{"max_timeout", p.MaxTimeout <= maxTimeout},
		{"output_bytes", p.OutputBytes <= base.OutputBytes},
		{"return_file_bytes", p.ReturnFileBytes <= base.ReturnFileBytes},
		{"network", p.Network == base.Network},
		{"allow", reflect.DeepEqual(p.Allow, base.Allow)},
		{"seccomp_errno", p.SeccompErrno == base.SeccompErrno},
		{"degraded", p.Degraded == base.Degraded},
	} {
		if !c.ok {
			return fmt.Errorf("its policy %q is looser than this node's in %s", p.Name, c.field)
		}
	}
	return nil
}

// sweepStoreOnce is one janitor's sweep of the shared store, bounded by
// storeSweepTimeout and cut short by Shutdown.
func (m *durable) sweepStoreOnce(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), storeSweepTimeout)
	defer cancel()
	go func() {
		select {
		case <-m.mgr.stopping():
			cancel()
		case <-ctx.Done():
		}
	}()
	ids, err := m.sweepStored(ctx, now)
	if err != nil {
		m.log().Warn("sweep the store", "err", err)
	}
	for range ids {
		m.metrics.expired()
	}
}

// storeSweepTimeout bounds one sweep of the shared store.
const storeSweepTimeout = 5 * time.Minute
