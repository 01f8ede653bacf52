package e2b

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/session/seam"
)

// listPage asks for one page and returns its ids and the response's headers.
func listPage(t *testing.T, d *Door, target string) (ids []string, next, total string, code int) {
	t.Helper()
	w := do(d, "GET", target, "", map[string]string{"X-API-KEY": testKey})
	if w.Code != 200 {
		return nil, "", "", w.Code
	}
	var ls []listed
	if err := json.Unmarshal(w.Body.Bytes(), &ls); err != nil {
		t.Fatalf("%s: %v: %s", target, err, w.Body)
	}
	for _, l := range ls {
		ids = append(ids, l.SandboxID)
	}
	return ids, w.Header().Get("X-Next-Token"), w.Header().Get("X-Total-Running"), w.Code
}

// TestListPagesAsE2BDoes: pages follow E2B's order (newest first, ties by
// id ascending; asc its exact reverse), a page token is a position that
// survives the sandbox it ended on, startedAfter is inclusive,
// X-Total-Running counts the running matches before paging, and the
// deprecated GET /sandboxes lists running sandboxes only.
func TestListPagesAsE2BDoes(t *testing.T) {
	d, f := newTestDoor(t, Options{StateDir: t.TempDir()})
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	// s0 oldest ... s4 newest; s2a and s2b started at the same instant.
	seed := []struct {
		id     string
		at     int
		paused bool
	}{{"n1-s0", 0, false}, {"n1-s1", 1, true}, {"n1-s2b", 2, false}, {"n1-s2a", 2, false}, {"n1-s4", 4, false}}
	for _, s := range seed {
		st := "ready"
		if s.paused {
			st = "hibernated"
		}
		f.live[s.id] = seam.Info{ID: s.id, State: st, CreatedAt: base.Add(time.Duration(s.at) * time.Second)}
		d.records.put(s.id, record{Owner: 1000, Template: "base", Metadata: map[string]string{"tag": "x"}})
	}
	all := func(q string) []string {
		var got []string
		token := ""
		for range 10 {
			target := "/v2/sandboxes?limit=2" + q
			if token != "" {
				target += "&nextToken=" + url.QueryEscape(token)
			}
			ids, next, _, code := listPage(t, d, target)
			if code != 200 {
				t.Fatalf("%s: %d", target, code)
			}
			got = append(got, ids...)
			if token = next; token == "" {
				return got
			}
		}
		t.Fatal("more than 10 pages")
		return nil
	}
	if got, want := strings.Join(all(""), " "), "n1-s4 n1-s2a n1-s2b n1-s1 n1-s0"; got != want {
		t.Errorf("desc pages: %s, want %s", got, want)
	}
	if got, want := strings.Join(all("&order=asc"), " "), "n1-s0 n1-s1 n1-s2b n1-s2a n1-s4"; got != want {
		t.Errorf("asc pages: %s, want %s", got, want)
	}
	if got, want := strings.Join(all("&startedAfter="+base.Add(2*time.Second).Format(time.RFC3339)), " "), "n1-s4 n1-s2a n1-s2b"; got != want {
		t.Errorf("startedAfter (inclusive): %s, want %s", got, want)
	}

	// X-Total-Running: running matches before paging; absent when only
	// paused ones were asked for.
	ids, next, total, _ := listPage(t, d, "/v2/sandboxes?limit=1")
	if len(ids) != 1 || next == "" || total != "4" {
		t.Errorf("limit=1: %v next %q total %q, want one, a token and 4 running", ids, next, total)
	}
	if ids, _, total, _ := listPage(t, d, "/v2/sandboxes?state=paused"); strings.Join(ids, " ") != "n1-s1" || total != "" {
		t.Errorf("state=paused: %v, X-Total-Running %q, want n1-s1 and no header", ids, total)
	}

	// The sandbox a page ended on is killed: the next page goes on after
	// where it stood.
	first, token, _, _ := listPage(t, d, "/v2/sandboxes?limit=2")
	delete(f.live, first[1])
	rest, _, _, _ := listPage(t, d, "/v2/sandboxes?limit=2&nextToken="+url.QueryEscape(token))
	if strings.Join(first, " ") != "n1-s4 n1-s2a" || strings.Join(rest, " ") != "n1-s2b n1-s1" {
		t.Errorf("pages %v then, with %s killed, %v; want n1-s2b n1-s1 next", first, first[1], rest)
	}

	// The deprecated list: running ones only, all of them, whatever asked.
	if ids, next, total, _ := listPage(t, d, "/sandboxes?state=paused&limit=1"); strings.Join(ids, " ") != "n1-s4 n1-s2b n1-s0" || next != "" || total != "" {
		t.Errorf("GET /sandboxes: %v next %q total %q, want the running ones, no page, no count", ids, next, total)
	}

	// Metadata as E2B's JS SDK sends it (each key and value escaped, then
	// the pairs as form data) finds a value with a space, & and = and a
	// non-ASCII letter in it; escaped only once, one without & and =.
	d.records.put("n1-s0", record{Owner: 1000, Template: "base", Metadata: map[string]string{"tag": "x", "note": "a b&c=d ü", "who": "a b ü"}})
	for _, m := range []string{"note=a%2520b%2526c%253Dd%2520%25C3%25BC", "who=a%20b%20%C3%BC"} {
		if ids, _, _, code := listPage(t, d, "/v2/sandboxes?metadata="+url.QueryEscape(m)); code != 200 || strings.Join(ids, " ") != "n1-s0" {
			t.Errorf("metadata %s: %d %v, want n1-s0", m, code, ids)
		}
	}

	// Bad input is named.
	for target, wantMsg := range map[string]string{
		"/v2/sandboxes?startedAfter=yesterday":                                                                  "startedAfter",
		"/v2/sandboxes?nextToken=%21%21":                                                                        "not a token this list gave",
		"/v2/sandboxes?order=sideways":                                                                          "order",
		"/v2/sandboxes?order=asc&nextToken=" + url.QueryEscape(token):                                           "other order",
		"/v2/sandboxes?nextToken=" + url.QueryEscape(strings.Repeat("A", 600)):                                  "at most 512",
		"/v2/sandboxes?nextToken=" + url.QueryEscape(base64.URLEncoding.EncodeToString([]byte("yesterday__x"))): "time",
	} {
		w := do(d, "GET", target, "", map[string]string{"X-API-KEY": testKey})
		if w.Code != 400 || !strings.Contains(w.Body.String(), wantMsg) {
			t.Errorf("%s: %d %s, want 400 naming %q", target, w.Code, w.Body, wantMsg)
		}
	}
}
