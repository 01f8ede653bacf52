package e2b

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// A sandbox's record: what E2B's control plane reports of it that a
// jailcell session does not know (its template name, metadata, whether it
// asked for the internet). It is kept beside the sessions' state so that a
// restarted service still lists and filters sandboxes by their metadata.

type record struct {
	Owner    int               `json:"owner"`
	Template string            `json:"template"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Started  time.Time         `json:"started"`
	// Envs are the envVars of the create (or the parent's, for a fork),
	// for envd's /envs; never written to the record's file, as they may
	// hold secrets, so nil after a restart: not known.
	Envs map[string]string `json:"-"`
	// Contexts are the code interpreter's contexts made in the sandbox
	// (besides its default one), each a namespace of its kernel.
	Contexts []codeContext `json:"contexts,omitempty"`
	// AutoResume: traffic to the sandbox while paused resumes it
	// (lifecycle autoResume), its health check included.
	AutoResume bool `json:"auto_resume,omitempty"`
	// PrivatePorts: made with network.allowPublicTraffic false, so its
	// ports need its token even where the door lets ports be public.
	PrivatePorts bool `json:"private_ports,omitempty"`
}

type records struct {
	dir string
	mu  sync.Mutex
	m   map[string]record
}

// idRE is what a record's file may be named after: a session id is
// "<node>-<hex>", and anything else could walk out of dir.
var idRE = regexp.MustCompile(`^[a-z0-9]{1,16}-[0-9a-f]{1,64}$`)

// maxRecordBytes bounds one record file read back: metadata is bounded at
// create (maxMetadata) well below it.
const maxRecordBytes = 64 << 10

func newRecords(dir string) (*records, error) {
	r := &records{dir: dir, m: map[string]record{}}
	if dir == "" {
		return r, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("e2b state dir: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("e2b state dir: %w", err)
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !idRE.MatchString(id) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.Size() > maxRecordBytes {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var rec record
		if json.Unmarshal(b, &rec) == nil {
			r.m[id] = rec
		}
	}
	return r, nil
}

func (r *records) get(id string) (record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.m[id]
	return rec, ok
}

// put keeps rec for id, written whole and renamed into place.
// owners is every recorded sandbox's owner, by id (a copy).
func (r *records) owners() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.m))
	for id, rec := range r.m {
		out[id] = rec.Owner
	}
	return out
}

func (r *records) put(id string, rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.putLocked(id, rec)
}

// putLocked is put with r.mu held: the file is written under the lock, so
// two updates cannot leave the older one on disk.
func (r *records) putLocked(id string, rec record) {
	r.m[id] = rec
	if r.dir == "" || !idRE.MatchString(id) {
		return
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	tmp := filepath.Join(r.dir, "."+id+".tmp")
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(r.dir, id+".json"))
	}
}

// update changes id's record with fn under the lock and keeps it; a
// sandbox without one (made through another door) gets one for owner.
// Nothing is kept if fn fails.
func (r *records) update(id string, owner int, tmpl string, fn func(*record) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.m[id]
	if !ok {
		rec = record{Owner: owner, Template: tmpl, Started: time.Now()}
	}
	rec.Contexts = slices.Clone(rec.Contexts)
	if err := fn(&rec); err != nil {
		return err
	}
	r.putLocked(id, rec)
	return nil
}

func (r *records) drop(id string) {
	r.mu.Lock()
	delete(r.m, id)
	r.mu.Unlock()
	if r.dir != "" && idRE.MatchString(id) {
		_ = os.Remove(filepath.Join(r.dir, id+".json"))
	}
}

// keepOnly drops owner's records of sandboxes that are gone (ended by
// their timeout, or killed elsewhere): live holds every id of owner's that
// still exists.
func (r *records) keepOnly(owner int, live map[string]bool) {
	r.mu.Lock()
	var gone []string
	for id, rec := range r.m {
		if rec.Owner == owner && !live[id] {
			gone = append(gone, id)
		}
	}
	r.mu.Unlock()
	for _, id := range gone {
		r.drop(id)
	}
}
