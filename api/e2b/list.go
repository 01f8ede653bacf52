package e2b

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// list answers the caller's sandboxes as E2B's GET /v2/sandboxes does:
// filtered by metadata ("k1=v1&k2=v2", each part URL-encoded), state,
// template and startedAfter (inclusive); newest first (ties by id,
// ascending) unless order=asc, the exact reverse; a page of limit
// (default 100) after nextToken. The deprecated GET /sandboxes lists the
// running ones only, all of them, with no page.
//
// A page token names a position in that order (a start time and an id),
// not a sandbox: the sandbox a page ended on may be gone by the next call,
// and the listing goes on after where it stood. X-Total-Running counts
// the running sandboxes the filters match, before paging, when running
// ones were asked for.
func (d *Door) list(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	q := r.URL.Query()
	v1 := r.URL.Path == "/sandboxes"
	want, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	states := map[string]bool{}
	for _, s := range q["state"] {
		for _, p := range strings.Split(s, ",") {
			if p != "running" && p != "paused" {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want running or paused", p))
				return
			}
			states[p] = true
		}
	}
	if v1 {
		states = map[string]bool{"running": true}
	}
	asc := false
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		asc = true
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("order %q: want asc or desc", o))
		return
	}
	var startedAfter time.Time
	if s := q.Get("startedAfter"); s != "" {
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("startedAfter %q: want an RFC 3339 date-time like 2026-01-02T15:04:05Z", s))
			return
		}
		startedAfter = at
	}
	limit := 100
	if s := q.Get("limit"); s != "" && !v1 {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want 1 to 1000", s))
			return
		}
		limit = n
	}
	var cur *cursor
	if s := q.Get("nextToken"); s != "" && !v1 {
		c, err := parseCursor(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("nextToken %.80q: %v", s, err))
			return
		}
		if c.asc != asc {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("nextToken %.80q: it continues a list in the other order; ask with the order it was given for", s))
			return
		}
		cur = &c
	}
	resp, e := d.call(r.Context(), t.owner, &api.Request{Op: api.OpSessions}, nil)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	d.records.keepOnly(t.owner, liveOf(resp.Sessions))
	infos := slices.Clone(resp.Sessions)
	slices.SortFunc(infos, func(a, b seam.Info) int { return compareListed(a.CreatedAt, a.ID, b.CreatedAt, b.ID, asc) })

	out := []listed{}
	next := ""
	running := 0
	var last seam.Info // the last sandbox on the page
	template := q.Get("template")
	for _, info := range infos {
		rec, _ := d.records.get(info.ID)
		if !matches(rec.Metadata, want) || template != "" && template != rec.Template ||
			!startedAfter.IsZero() && info.CreatedAt.Before(startedAfter) {
			continue
		}
		state := "running"
		if info.State == "hibernated" {
			state = "paused"
		}
		if len(states) > 0 && !states[state] {
			continue
		}
		if state == "running" {
			running++
		}
		if cur != nil && compareListed(info.CreatedAt, info.ID, cur.at, cur.id, asc) <= 0 {
			continue // on an earlier page
		}
		if !v1 && len(out) == limit {
			// One more after a full page: there is a next one. The rest
			// is only counted for X-Total-Running.
			if next == "" {
				next = cursor{at: last.CreatedAt, id: last.ID, asc: asc}.String()
			}
			continue
		}
		out = append(out, d.listedOf(r, t.owner, info))
		last = info
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	if !v1 && (len(states) == 0 || states["running"]) {
		w.Header().Set("X-Total-Running", strconv.Itoa(running))
	}
	writeJSON(w, http.StatusOK, out)
}

// parseMetadataQuery reads list's metadata filter as E2B's server does:
// the value is unescaped once more, then split into k=v pairs at & and =,
// and each key and value unescaped again. E2B's SDKs escape each key and
// value, then the pairs as form data: "a b" arrives (once the query is
// decoded) as a%2520b. A value escaped only once decodes the same way,
// unless it holds & or = (as with E2B's server).
func parseMetadataQuery(m string) (map[string]string, error) {
	want := map[string]string{}
	if m == "" {
		return want, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("metadata %.200q: %s; want k1=v1&k2=v2, each key and value URL-encoded", m, why)
	}
	all, err := url.QueryUnescape(m)
	if err != nil {
		return nil, bad(err.Error())
	}
	for pair := range strings.SplitSeq(all, "&") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 {
			return nil, bad(fmt.Sprintf("%.80q is not one key=value", pair))
		}
		k, err := url.QueryUnescape(kv[0])
		if err != nil {
			return nil, bad("key: " + err.Error())
		}
		v, err := url.QueryUnescape(kv[1])
		if err != nil {
			return nil, bad("value: " + err.Error())
		}
		want[k] = v
	}
	return want, nil
}

// compareListed orders sandboxes as E2B's list does: by start time, newest
// first, ties by id ascending; asc is the exact reverse.
func compareListed(at time.Time, id string, bt time.Time, bid string, asc bool) int {
	c := bt.Compare(at)
	if c == 0 {
		c = strings.Compare(id, bid)
	}
	if asc {
		return -c
	}
	return c
}

// cursor is a position in a listing: the start time and id of the last
// sandbox a page held, and the order it was in.
type cursor struct {
	at  time.Time
	id  string
	asc bool
}

// String encodes c as E2B's tokens are: base64url of "TIME__ID", with
// "__asc" for an ascending list.
func (c cursor) String() string {
	s := c.at.UTC().Format(time.RFC3339Nano) + "__" + c.id
	if c.asc {
		s += "__asc"
	}
	return base64.URLEncoding.EncodeToString([]byte(s))
}

// parseCursor reads a token String made. It comes from the caller: the
// decoded text is bounded and every part checked.
func parseCursor(s string) (cursor, error) {
	const bad = "not a token this list gave (base64url of TIME__ID)"
	if len(s) > 512 {
		return cursor{}, fmt.Errorf("%s: %d bytes, at most 512", bad, len(s))
	}
	b, err := base64.URLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, fmt.Errorf("%s: %v", bad, err)
	}
	parts := strings.Split(string(b), "__")
	if len(parts) < 2 || len(parts) > 3 || parts[1] == "" || len(parts) == 3 && parts[2] != "asc" {
		return cursor{}, fmt.Errorf("%s", bad)
	}
	at, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		return cursor{}, fmt.Errorf("%s: time: %v", bad, err)
	}
	return cursor{at: at, id: parts[1], asc: len(parts) == 3}, nil
}
