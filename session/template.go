package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/runner"
)

// Templates: where criu works, a new kernel is not started and made to
// import Config.Preload (about 0.5 CPU-s for numpy, pandas and matplotlib)
// but restored from a checkpoint of one that already did, onto the new
// session's own disk and uid slot, as a fork is. One template per policy,
// built in the background when the manager starts (and on first use for
// other policies), kept in <state>/templates under a key of everything they depend on
// (templateKey): a later daemon reuses a template that matches and removes
// one that does not, so a new rootfs, preload list, policy, kernel or criu
// never meets an old template. A create that finds no ready template, or
// whose restore fails, imports as before; Info.Start says which path it
// took, and so do the metrics.
//
// A restored kernel would share the template's randomness with every other
// session from it: Python's random, numpy's global generator, tempfile's
// names and multiprocessing's authkey were seeded once, at import. The
// kernel reseeds them from its own os.urandom before the session is handed
// out (runner.Conn.Reseed); a kernel that cannot is not used. What cannot
// be reseeded once the interpreter runs, the str hash secret, is shared by
// the sessions of one template (SECURITY.md).

// Start paths, in Info.Start and the metrics.
const (
	StartTemplate = "template" // restored from the policy's template
	StartImport   = "import"   // a fresh interpreter imported the preload
)

// templatesName is the templates' directory in the state dir.
const templatesName = "templates"

// templateFailures is how many failed restores in a row retire a template:
// its policy's creates import from then on.
const templateFailures = 3

type templates struct {
	mu      sync.Mutex
	byName  map[string]*template
	closed  bool
	builds  sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
	enabled bool
	// Per configured policy, computed once at start: its template's key
	// (templateKey) and the policy encoded, which a create's must equal.
	keys, encs map[string]string
}

// template is one policy's checkpoint. ready is closed when the build has
// ended, well or not.
type template struct {
	name   string
	images string
	ready  chan struct{}
	err    error // why the build failed (set before ready is closed)

	mu       sync.Mutex
	failures int
	retired  bool
}

// templateReady marks a template directory whose build completed.
const templateReady = "template-ready"

// templateKey names everything a template depends on: the kernel package
// (runner.KernelDigest), the preload list, the policy, the wheelhouse mount, the rootfs and criu
// (isolate.Host.CheckpointIdentity). A change to any of them makes a new
// key, so the old template is never restored and is removed at the next
// start.
func (m *warmStarts) templateKey(p policy.Policy) (key, enc string) {
	b, _ := json.Marshal(p)
	h := sha256.New()
	h.Write(runner.KernelDigest())
	fmt.Fprintf(h, "\x00preload=%s\x00wheelhouse=%s\x00policy=%s\x00", strings.Join(m.cfg.Preload, ","), m.cfg.Wheelhouse, b)
	h.Write([]byte(m.host.CheckpointIdentity()))
	return hex.EncodeToString(h.Sum(nil))[:32], string(b)
}

// initTemplates keeps the templates an earlier daemon built that still
// match, removes the others, and, if templates can work here, starts
// building the missing ones for the default policy and each pooled one.
func (m *warmStarts) initTemplates() {
	ctx, cancel := context.WithCancel(context.Background())
	m.tmpl = &templates{byName: map[string]*template{}, ctx: ctx, cancel: cancel}
	dir := filepath.Join(m.cfg.StateDir, templatesName)
	enabled := !m.cfg.NoTemplate && len(m.cfg.Preload) > 0
	if enabled {
		if err := m.host.CriuCheck(); err != nil {
			m.log().Info("sessions start by importing the preload: no template without checkpoint/restore", "reason", err)
			enabled = false
		}
	}
	if !enabled {
		_ = os.RemoveAll(dir)
		return
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		m.log().Warn("templates off", "err", err)
		return
	}
	m.tmpl.enabled = true
	m.tmpl.keys, m.tmpl.encs = map[string]string{}, map[string]string{}
	keep := map[string]string{} // dir name -> policy name
	for name, p := range m.cfg.Policies {
		key, enc := m.templateKey(p)
		m.tmpl.keys[name], m.tmpl.encs[name] = key, enc
		keep[key] = name
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		name, ok := keep[e.Name()]
		if _, err := os.Stat(filepath.Join(path, templateReady)); !ok || err != nil {
			_ = os.RemoveAll(path)
			continue
		}
		if err := m.stateQuota.charge(path, allocatedBytes(path)); err != nil {
			_ = os.RemoveAll(path)
			continue
		}
		t := &template{name: name, images: path, ready: make(chan struct{})}
		close(t.ready)
		m.tmpl.byName[name] = t
	}
	names := []string{"default"}
	for name, n := range m.cfg.Pool {
		if n > 0 && name != "default" {
			names = append(names, name)
		}
	}
	for _, name := range names {
		m.templateFor(m.cfg.Policies[name])
	}
}

// templateFor returns p's template, starting its build if there is none;
// nil if p cannot have one (templates off, or p is not a configured policy
// as configured: an override).
func (m *warmStarts) templateFor(p policy.Policy) *template {
	ts := m.tmpl
	if ts == nil || !ts.enabled {
		return nil
	}
	enc, ok := ts.encs[p.Name]
	if !ok {
		return nil
	}
	if b, _ := json.Marshal(p); string(b) != enc {
		return nil // an override
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return nil
	}
	if t, ok := ts.byName[p.Name]; ok {
		return t
	}
	t := &template{
		name: p.Name, ready: make(chan struct{}),
		images: filepath.Join(m.cfg.StateDir, templatesName, ts.keys[p.Name]),
	}
	ts.byName[p.Name] = t
	ts.builds.Add(1)
	go func() {
		defer ts.builds.Done()
		start := time.Now()
		t.err = m.buildTemplate(ts.ctx, p, t.images)
		close(t.ready)
		if t.err != nil {
			if ts.ctx.Err() == nil {
				m.log().Warn("session template not built: creates of this policy import the preload", "policy", p.Name, "err", t.err)
			}
			return
		}
		m.log().Info("session template ready", "policy", p.Name, "build_ms", time.Since(start).Milliseconds(), "image_bytes", dirBytes(t.images))
	}()
	return t
}

// usable reports whether t is built and not retired, without waiting.
func (t *template) usable() bool {
	select {
	case <-t.ready:
	default:
		return false
	}
	if t.err != nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.retired
}

// wait waits until t's build has ended or ctx is done.
func (t *template) wait(ctx context.Context) {
	select {
	case <-t.ready:
	case <-ctx.Done():
	}
}

// buildTemplate starts a kernel of policy p that imports the preload, and
// checkpoints it into images, ending it. The kernel runs no cell.
func (m *warmStarts) buildTemplate(ctx context.Context, p policy.Policy, images string) (retErr error) {
	release, err := m.admitStart(ctx)
	if err != nil {
		return err
	}
	defer release()
	s, err := m.mgr.newSession(0, p)
	if err != nil {
		return err
	}
	defer func() { _ = m.mgr.destroy(s) }()
	k, err := m.startKernel(ctx, s.disk, s.ctlDir(), p)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.k = k
	s.mu.Unlock()
	if err := m.stateQuota.charge(images, imagesReserve(p)); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(images)
			m.stateQuota.release(images)
		}
	}()
	// As a hibernation: the kernel must drop its end of the socket first.
	_ = k.conn.Close()
	_ = k.listener.Close()
	for try := 0; try < 3; try++ {
		time.Sleep(time.Duration(20+50*try) * time.Millisecond)
		if err = k.sb.Checkpoint(images, false); err == nil || errors.Is(err, isolate.ErrTimeout) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	_ = os.Remove(filepath.Join(images, "dump.log"))
	<-k.sb.Done()
	n := allocatedBytes(images)
	m.stateQuota.release(images)
	if err := m.stateQuota.charge(images, n); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(images, templateReady), []byte(time.Now().UTC().Format(time.RFC3339)), 0o600)
}

// startFromTemplate restores p's template as s's kernel and reseeds it.
// It returns (nil, nil) when there is no ready template to use, or when
// another checkpoint or restore is running (criu runs one at a time per
// daemon: see isolate.Disk.RestoreIfIdle); the caller imports then.
func (m *warmStarts) startFromTemplate(ctx context.Context, s *Session) (*kernel, error) {
	t := m.templateFor(s.policy)
	if t == nil || !t.usable() {
		return nil, nil
	}
	images := filepath.Join(s.dir, "template-images")
	t0 := time.Now()
	err := m.copyTemplate(t, images)
	t1 := t0
	defer func() {
		_ = os.RemoveAll(images)
		m.stateQuota.release(images)
	}()
	var k *kernel
	if err == nil {
		t1 = time.Now()
		k, err = m.restoreKernelIfIdle(ctx, s, images)
		if errors.Is(err, isolate.ErrBusy) {
			// criu restores one at a time: rather than queue behind
			// another (a burst of creates, the restarts of a soak), this
			// kernel imports, in parallel with it.
			return nil, nil
		}
	}
	if err == nil {
		t2 := time.Now()
		err = k.conn.Reseed(ctx)
		m.log().Debug("kernel restored from template", "session", s.id, "link_ms", t1.Sub(t0).Milliseconds(),
			"restore_ms", t2.Sub(t1).Milliseconds(), "reseed_ms", time.Since(t2).Milliseconds())
		if err != nil {
			_ = k.close()
			k = nil
			err = fmt.Errorf("reseed: %w", err)
		}
	}
	t.mu.Lock()
	// A start its caller abandoned says nothing of the template (see
	// startFromZygote).
	if err != nil && ctx.Err() == nil {
		t.failures++
		if t.failures >= templateFailures && !t.retired {
			t.retired = true
			m.log().Warn("session template retired after failed restores: creates of this policy import the preload", "policy", t.name, "err", err)
		}
	} else {
		t.failures = 0
	}
	t.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("restore template of policy %s: %w", t.name, err)
	}
	return k, nil
}

// copyTemplate makes dir a restorable copy of t's images: pages linked,
// the rest (well under 1 MB) copied and charged to the state quota.
func (m *warmStarts) copyTemplate(t *template, dir string) error {
	n, err := isolate.LinkImages(t.images, dir)
	if cerr := m.stateQuota.charge(dir, n); err == nil {
		err = cerr
	}
	return err
}

// closeTemplates stops the builds in flight. Built templates stay for the
// next daemon (initTemplates decides whether they still match).
func (m *warmStarts) closeTemplates() {
	ts := m.tmpl
	if ts == nil {
		return
	}
	ts.mu.Lock()
	ts.closed = true
	ts.mu.Unlock()
	ts.cancel()
	ts.builds.Wait()
}
