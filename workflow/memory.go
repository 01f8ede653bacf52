package workflow

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session/seam"
)

// FailuresFile is the failure memory's file in the review directory.
const FailuresFile = "failures.json"

const (
	// maxCodesPerFailure bounds the code hashes one fingerprint remembers.
	maxCodesPerFailure = 32
	// A failure keeps at most maxModules of the modules a cell imports,
	// each at most maxModuleName bytes: any line that looks like an import
	// counts, even one in a string.
	maxModules    = 64
	maxModuleName = 64
	// maxFailuresPerOwner and maxFailures bound the fingerprints kept, the
	// least recently seen going first: an owner failing on purpose with
	// ever new code pushes out its own, not another owner's.
	maxFailuresPerOwner = 1000
	maxFailures         = 100000
	// maxFailuresFile bounds failures.json, read at start and written.
	maxFailuresFile = 64 << 20
)

// Failure is one remembered fingerprint of one owner's requests under one
// policy. Owners never share them: another user's failures would skip your
// requests (a denial of service by failing on purpose) and show you their
// errors. Policies never share them either: code that ran out of memory
// under a 128 MiB session says nothing about the same code under 1 GiB.
type Failure struct {
	// UID is the owner whose requests failed (0: root, and entries written
	// before failures were kept per owner).
	UID int `json:"uid"`
	// Policy names the policy the requests ran under; PolicyHash tells
	// apart its effective versions (tightened at create, or reconfigured).
	// Entries written before failures were kept per policy have neither and
	// match nothing.
	Policy      string    `json:"policy,omitempty"`
	PolicyHash  string    `json:"policy_hash,omitempty"`
	Fingerprint string    `json:"fingerprint"`
	Type        string    `json:"type"`
	Message     string    `json:"message"` // normalised
	Modules     []string  `json:"modules,omitempty"`
	Count       int       `json:"count"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
	// Codes are hashes of the (whitespace-normalised) code of requests
	// that ended in this failure: how a new request, which has not run
	// yet, is matched to it.
	Codes []string `json:"codes"`
}

type memory struct {
	mu   sync.Mutex
	path string // "" = not persisted
	ttl  time.Duration
	now  func() time.Time
	log  *slog.Logger
	m    map[string]*Failure
	// perOwner and total are maxFailuresPerOwner and maxFailures (tests
	// lower them).
	perOwner, total int
}

// openMemory loads the failure memory in dir. A file it cannot read back
// (corrupt, over maxFailuresFile, not a regular file) is renamed
// failures.json.corrupt-<time> and memory starts empty, with a warning:
// losing remembered failures is better than a daemon that will not start.
func openMemory(dir string, ttl time.Duration, now func() time.Time, log *slog.Logger) (*memory, error) {
	mem := &memory{ttl: ttl, now: now, log: log, m: map[string]*Failure{}, perOwner: maxFailuresPerOwner, total: maxFailures}
	if dir == "" {
		return mem, nil
	}
	if err := checkReviewDir(dir); err != nil {
		return nil, err
	}
	mem.path = filepath.Join(dir, FailuresFile)
	list, err := readFailures(mem.path)
	if errors.Is(err, os.ErrNotExist) {
		return mem, nil
	}
	if err != nil {
		aside := mem.path + ".corrupt-" + now().UTC().Format("20060102T150405.000000000Z")
		if rerr := os.Rename(mem.path, aside); rerr != nil {
			return nil, fmt.Errorf("set aside failure memory %s (%v): %w", mem.path, err, rerr)
		}
		log.Warn("failure memory unreadable: set aside, starting empty", "path", mem.path, "moved_to", aside, "err", err)
		return mem, nil
	}
	for _, f := range list {
		f.Modules = capModules(f.Modules)
		mem.m[memKey(f.UID, scope{f.Policy, f.PolicyHash}, f.Fingerprint)] = f
	}
	mem.expire()
	mem.trim()
	return mem, nil
}

// readFailures reads a failures file: never through a symlink, never
// waiting on a FIFO, never more than maxFailuresFile.
func readFailures(path string) ([]*Failure, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("read failure memory %s: %w", path, err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read failure memory %s: a %s, not a regular file", path, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFailuresFile+1))
	if err != nil {
		return nil, fmt.Errorf("read failure memory %s: %w", path, err)
	}
	if len(b) > maxFailuresFile {
		return nil, fmt.Errorf("read failure memory %s: over %d bytes", path, maxFailuresFile)
	}
	var list []*Failure
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("decode failure memory %s: %w", path, err)
	}
	return list, nil
}

var (
	numRE   = regexp.MustCompile(`0x[0-9a-fA-F]+|\b[0-9a-fA-F]{8,}\b|\d+(\.\d+)?`)
	pathRE  = regexp.MustCompile(`(/[\w.@+-]+)+/?`)
	quoteRE = regexp.MustCompile(`'/[^']*'|"/[^"]*"`)
	// importRE finds the top-level modules a cell imports.
	importRE = regexp.MustCompile(`(?m)^\s*(?:from\s+([A-Za-z_][\w]*)[\w.]*\s+import\b|import\s+([A-Za-z_][\w.]*(?:\s*(?:as\s+\w+)?\s*,\s*[A-Za-z_][\w.]*)*))`)
)

// Normalise takes numbers, hex and paths out of an error message so the
// same failure on other data has one fingerprint.
func Normalise(msg string) string {
	msg = quoteRE.ReplaceAllString(msg, "<path>")
	msg = pathRE.ReplaceAllString(msg, "<path>")
	msg = numRE.ReplaceAllString(msg, "<n>")
	if len(msg) > 500 {
		msg = msg[:500]
	}
	return msg
}

// Imports lists the top-level modules code imports, sorted, deduplicated.
func Imports(code string) []string {
	set := map[string]bool{}
	for _, m := range importRE.FindAllStringSubmatch(code, -1) {
		if m[1] != "" {
			set[m[1]] = true
			continue
		}
		for _, part := range strings.Split(m[2], ",") {
			name := strings.Fields(part)
			if len(name) > 0 {
				set[strings.SplitN(name[0], ".", 2)[0]] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	return capModules(out)
}

// capModules sorts names and keeps at most maxModules of at most
// maxModuleName bytes.
func capModules(names []string) []string {
	out := names[:0:0]
	for _, n := range names {
		if len(n) <= maxModuleName {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	if len(out) > maxModules {
		out = out[:maxModules]
	}
	return out
}

// Fingerprint is the identity of a failure: error type, normalised
// message, imported modules.
func Fingerprint(errType, msg string, modules []string) string {
	h := sha256.Sum256([]byte(errType + "\x00" + Normalise(msg) + "\x00" + strings.Join(modules, ",")))
	return hex.EncodeToString(h[:8])
}

// scope is the policy a request runs under: its name and a digest of its
// effective value.
type scope struct{ name, hash string }

func scopeOf(p policy.Policy, name string) scope {
	b, _ := json.Marshal(p) // a struct of plain fields: cannot fail
	h := sha256.Sum256(b)
	return scope{name: name, hash: hex.EncodeToString(h[:8])}
}

// memKey is a failure's key in memory: per owner and policy.
func memKey(uid int, sc scope, fp string) string {
	return fmt.Sprintf("%d/%s/%s/%s", uid, sc.name, sc.hash, fp)
}

func codeHash(code string) string {
	h := sha256.Sum256([]byte(strings.Join(strings.Fields(code), " ")))
	return hex.EncodeToString(h[:8])
}

func failureOf(res *seam.Result) (typ, msg string) {
	if res.Error != nil {
		return res.Error.Type, res.Error.Message
	}
	return res.Status, ""
}

// record counts one loop-ending failure of owner's under sc. first is the
// request's code (how owner's later requests are matched), last the code
// of the final attempt.
func (m *memory) record(owner int, sc scope, first, last string, res *seam.Result) string {
	if res == nil {
		return ""
	}
	typ, msg := failureOf(res)
	mods := Imports(last)
	fp := Fingerprint(typ, msg, mods)
	now := m.now().UTC()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	k := memKey(owner, sc, fp)
	f := m.m[k]
	added := f == nil
	if added {
		f = &Failure{UID: owner, Policy: sc.name, PolicyHash: sc.hash, Fingerprint: fp, Type: typ, Message: Normalise(msg), Modules: mods, FirstSeen: now}
		m.m[k] = f
	}
	f.Count++
	f.LastSeen = now
	for _, c := range []string{codeHash(first), codeHash(last)} {
		if !contains(f.Codes, c) {
			f.Codes = append(f.Codes, c)
		}
	}
	if len(f.Codes) > maxCodesPerFailure {
		f.Codes = f.Codes[len(f.Codes)-maxCodesPerFailure:]
	}
	if added {
		m.trim()
	}
	if err := m.save(); err != nil {
		m.log.Warn("save failure memory", "path", m.path, "err", err)
	}
	return fp
}

// trim forgets the least recently seen fingerprints while an owner has
// more than perOwner, or everyone more than total. Caller holds mu.
func (m *memory) trim() {
	per := map[int]int{}
	for _, f := range m.m {
		per[f.UID]++
	}
	all := len(m.m) > m.total
	var list []*Failure
	for _, f := range m.m {
		if all || per[f.UID] > m.perOwner {
			list = append(list, f)
		}
	}
	slices.SortFunc(list, func(a, b *Failure) int { return a.LastSeen.Compare(b.LastSeen) })
	for _, f := range list {
		if per[f.UID] > m.perOwner || len(m.m) > m.total {
			delete(m.m, memKey(f.UID, scope{f.Policy, f.PolicyHash}, f.Fingerprint))
			per[f.UID]--
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// lookup finds a remembered failure of owner's code under sc seen at least
// threshold times.
func (m *memory) lookup(owner int, sc scope, code string, threshold int) *Known {
	h := codeHash(code)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	var best *Failure
	for _, f := range m.m {
		if f.UID == owner && f.Policy == sc.name && f.PolicyHash == sc.hash &&
			f.Count >= threshold && contains(f.Codes, h) && (best == nil || f.Count > best.Count) {
			best = f
		}
	}
	if best == nil {
		return nil
	}
	return &Known{Fingerprint: best.Fingerprint, Policy: best.Policy, Type: best.Type, Message: best.Message, Modules: best.Modules,
		Count: best.Count, FirstSeen: best.FirstSeen, LastSeen: best.LastSeen, Force: forceHint}
}

// expire drops fingerprints not seen within the TTL. Caller holds mu.
func (m *memory) expire() {
	cut := m.now().Add(-m.ttl)
	for k, f := range m.m {
		if f.LastSeen.Before(cut) {
			delete(m.m, k)
		}
	}
}

// save writes the memory atomically: to a new temporary file, never one
// found in place, renamed over the old. The least recently seen entries
// past maxFailuresFile are forgotten, so what is written reads back.
// Caller holds mu. A failure to save loses memory, never a request: the
// caller logs it.
func (m *memory) save() error {
	if m.path == "" {
		return nil
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	full := false
	for i, f := range m.listLocked() { // most recent first
		b, err := json.Marshal(f)
		if err != nil {
			return err
		}
		if full = full || buf.Len()+len(b)+2 > maxFailuresFile; full {
			delete(m.m, memKey(f.UID, scope{f.Policy, f.PolicyHash}, f.Fingerprint))
			continue
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	tmp, err := os.CreateTemp(filepath.Dir(m.path), FailuresFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("write failure memory: %w", err)
	}
	_, err = tmp.Write(buf.Bytes())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), m.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write failure memory: %w", err)
	}
	return nil
}

func (m *memory) listLocked() []*Failure { return m.listOf(-1) }

// listOf lists owner's failures (owner < 0: everyone's). Caller holds mu.
func (m *memory) listOf(owner int) []*Failure {
	list := make([]*Failure, 0, len(m.m))
	for _, f := range m.m {
		if owner >= 0 && f.UID != owner {
			continue
		}
		c := *f
		list = append(list, &c)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].LastSeen.After(list[j].LastSeen) })
	return list
}

// Failures lists owner's remembered failures, most recent first; root
// (owner 0) sees everyone's.
func (r *Runner) Failures(owner int) []*Failure {
	r.mem.mu.Lock()
	defer r.mem.mu.Unlock()
	r.mem.expire()
	if owner == 0 {
		return r.mem.listOf(-1)
	}
	return r.mem.listOf(owner)
}

// ClearFailures forgets every remembered failure and returns how many.
func (r *Runner) ClearFailures() (int, error) {
	r.mem.mu.Lock()
	defer r.mem.mu.Unlock()
	n := len(r.mem.m)
	r.mem.m = map[string]*Failure{}
	return n, r.mem.save()
}

// cliLog is the logger of the functions the review command calls: their
// warnings go to its user.
var cliLog = slog.New(slog.NewTextHandler(os.Stderr, nil))

// LoadFailures reads the failure memory in dir without a Runner (the
// review command), dropping entries older than ttl.
func LoadFailures(dir string, ttl time.Duration) ([]*Failure, error) {
	mem, err := openMemory(dir, ttl, time.Now, cliLog)
	if err != nil {
		return nil, err
	}
	return mem.listLocked(), nil
}

// ClearFailuresIn empties the failure memory in dir.
func ClearFailuresIn(dir string) (int, error) {
	mem, err := openMemory(dir, 100*365*24*time.Hour, time.Now, cliLog)
	if err != nil {
		return 0, err
	}
	n := len(mem.m)
	mem.m = map[string]*Failure{}
	return n, mem.save()
}
