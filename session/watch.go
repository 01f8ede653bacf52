package session

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/confined"
)

// Bounds of directory watches: each poll rescans the workspace (bounded
// like every scan), so both their number and their rate are capped.
const (
	// MaxWatches is the most watches one session holds.
	MaxWatches = 8
	// MaxWatchEvents is the most events one poll returns; past it the
	// poll says "overflow" and the watch starts again from what is there.
	MaxWatchEvents = 1000
	// watchMinInterval: a poll sooner than this after the last one of the
	// same watch answers no events without scanning.
	watchMinInterval = 100 * time.Millisecond
	// watchStartBurst and watchStartEvery bound a session's watch starts,
	// each a full scan of the workspace: at most watchStartBurst at once,
	// then one per watchStartEvery. Starting and stopping watches in a
	// loop would otherwise scan without end.
	watchStartBurst = MaxWatches
	watchStartEvery = 250 * time.Millisecond
)

type watch struct {
	mu        sync.Mutex // one poll at a time
	dir       string     // relative to Workdir, "" for all of it
	recursive bool
	stamps    map[string]fileStamp
	last      time.Time
}

// Watch watches a directory of session id's workspace by polling: start
// takes a stamp of every entry below it (only its direct entries unless
// Recursive), each poll compares the workspace with the last stamps and
// answers what was created, written, removed or renamed (a removal and a
// creation of the same inode) since. Host-side, from the upper layer,
// with the bounds of every workspace scan; nothing runs in the sandbox.
// Watches end with the session.
func (wk *Workspace) Watch(ctx context.Context, owner int, id string, req WatchRequest) (*WatchResult, error) {
	switch req.Action {
	case "", WatchStart:
		req.Action = WatchStart
	case WatchPoll, WatchStop:
		if req.Watch == "" {
			return nil, fmt.Errorf("%w: %s needs watch, the id start answered", ErrBadRequest, req.Action)
		}
	default:
		return nil, fmt.Errorf("%w: action %q: allowed %s, %s, %s", ErrBadRequest, req.Action, WatchStart, WatchPoll, WatchStop)
	}
	dir := ""
	if req.Action == WatchStart {
		if p := strings.TrimSuffix(req.Path, "/"); p != "" && p != Workdir && p != "." {
			rel, err := cleanRel(p)
			if err != nil {
				return nil, err
			}
			dir = rel
		}
	}
	s, err := wk.host.lookup(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if req.Action == WatchStop {
		s.mu.Lock()
		_, ok := s.watches[req.Watch]
		delete(s.watches, req.Watch)
		s.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: no watch %q in session %s", ErrNotFound, req.Watch, id)
		}
		return &WatchResult{Watch: req.Watch, Events: []WatchEvent{}}, nil
	}
	if req.Action == WatchStart {
		if dir != "" {
			ws, err := s.workspace()
			if err != nil {
				return nil, err
			}
			if ws == nil {
				return nil, fmt.Errorf("%w: no directory %s in the workspace", ErrNotFound, dir)
			}
			st, err := lstat(ws, dir)
			ws.Close()
			if err != nil || !confined.IsType(&st, unix.S_IFDIR) {
				return nil, fmt.Errorf("%w: no directory %s in the workspace", ErrNotFound, dir)
			}
		}
		if err := admitWatch(s, time.Now()); err != nil {
			return nil, err
		}
		w := &watch{dir: dir, recursive: req.Recursive}
		stamps, _ := wk.watchScan(s, w)
		w.stamps, w.last = stamps, time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.watchStarting--
		if s.watches == nil {
			s.watches = map[string]*watch{}
		}
		s.watchSeq++
		name := "watch-" + strconv.Itoa(s.watchSeq)
		s.watches[name] = w
		return &WatchResult{Watch: name, Events: []WatchEvent{}}, nil
	}
	s.mu.Lock()
	w, ok := s.watches[req.Watch]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: no watch %q in session %s (watches end with their session)", ErrNotFound, req.Watch, id)
	}
	res := &WatchResult{Watch: req.Watch, Events: []WatchEvent{}}
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.last) < watchMinInterval {
		return res, nil
	}
	now, complete := wk.watchScan(s, w)
	w.last = time.Now()
	res.Events, res.Overflow = watchDiff(w.stamps, now)
	if !complete {
		// A partial scan's absences mean nothing: keep what it missed.
		res.Overflow = true
		for p, st := range w.stamps {
			if _, ok := now[p]; !ok {
				now[p] = st
			}
		}
		res.Events = slicesDeleteRemoves(res.Events)
	}
	w.stamps = now
	return res, nil
}

// admitWatch takes a place under MaxWatches and one of the session's
// watch starts before the start scans anything: a start past either limit
// used to be refused only after its full scan of the workspace. The
// caller gives the place back (watchStarting) once the watch is in.
func admitWatch(s *Session, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.watches) + s.watchStarting; n >= MaxWatches {
		return fmt.Errorf("%w: session %s has %d watches, at most %d: stop one first", ErrLimit, s.id, n, MaxWatches)
	}
	if s.watchTokensAt.IsZero() {
		s.watchTokens = watchStartBurst
	} else {
		s.watchTokens = min(watchStartBurst, s.watchTokens+float64(now.Sub(s.watchTokensAt))/float64(watchStartEvery))
	}
	s.watchTokensAt = now
	if s.watchTokens < 1 {
		wait := time.Duration((1 - s.watchTokens) * float64(watchStartEvery)).Round(time.Millisecond)
		return fmt.Errorf("%w: session %s started watches too fast: at most %d at once, then one every %s (each start scans the workspace); try again in %s",
			ErrLimit, s.id, watchStartBurst, watchStartEvery, max(wait, time.Millisecond))
	}
	s.watchTokens--
	s.watchStarting++
	return nil
}

// watchScan stamps what w watches; complete is false if the scan was cut
// short (a bound, a concurrent rename).
func (wk *Workspace) watchScan(s *Session, w *watch) (map[string]fileStamp, bool) {
	out := map[string]fileStamp{}
	s.mu.Lock()
	s.watchScans++
	s.mu.Unlock()
	ws, err := s.workspace()
	if err != nil || ws == nil {
		return out, err == nil
	}
	defer ws.Close()
	prefix := ""
	if w.dir != "" {
		prefix = w.dir + "/"
	}
	err = walk(ws, time.Now().Add(scanTimeout), func(p string, st *unix.Stat_t) {
		if !strings.HasPrefix(p, prefix) {
			return
		}
		name := p[len(prefix):]
		if !w.recursive && strings.Contains(name, "/") {
			return
		}
		out[name] = fileStamp{size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), ino: st.Ino, dir: confined.IsType(st, unix.S_IFDIR)}
	})
	return out, err == nil || !(errors.Is(err, errScanChanged) || errors.Is(err, errScanLimit))
}

// watchDiff lists the changes from before to after, sorted by name, at
// most MaxWatchEvents (overflow beyond).
func watchDiff(before, after map[string]fileStamp) ([]WatchEvent, bool) {
	var created, removed []string
	var events []WatchEvent
	for p, a := range after {
		b, ok := before[p]
		switch {
		case !ok:
			created = append(created, p)
		case b.ino != a.ino:
			events = append(events, WatchEvent{Name: p, Type: EventRemove}, WatchEvent{Name: p, Type: EventCreate})
		case !a.dir && (b.size != a.size || b.mtime != a.mtime):
			events = append(events, WatchEvent{Name: p, Type: EventWrite})
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			removed = append(removed, p)
		}
	}
	// A name gone and a new one with its inode: a rename, as inotify
	// reports it (rename on the old name, create on the new).
	byIno := map[uint64]string{}
	for _, p := range created {
		byIno[after[p].ino] = p
	}
	for _, p := range removed {
		if _, ok := byIno[before[p].ino]; ok {
			events = append(events, WatchEvent{Name: p, Type: EventRename})
		} else {
			events = append(events, WatchEvent{Name: p, Type: EventRemove})
		}
	}
	for _, p := range created {
		events = append(events, WatchEvent{Name: p, Type: EventCreate})
		if after[p].size > 0 && !after[p].dir {
			events = append(events, WatchEvent{Name: p, Type: EventWrite})
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Name < events[j].Name })
	if len(events) > MaxWatchEvents {
		return events[:MaxWatchEvents], true
	}
	if events == nil {
		events = []WatchEvent{}
	}
	return events, false
}

// slicesDeleteRemoves drops removal events, which a partial scan cannot
// vouch for.
func slicesDeleteRemoves(evs []WatchEvent) []WatchEvent {
	out := evs[:0]
	for _, e := range evs {
		if e.Type != EventRemove && e.Type != EventRename {
			out = append(out, e)
		}
	}
	return out
}
