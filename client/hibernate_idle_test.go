package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/isolate"
)

// hibernateOnIdle: a session created with HibernateOnIdle and a 1 s TTL
// is hibernated at it, not ended, and its next cell finds its variables;
// its info and the listing say so.
func hibernateOnIdle(t *testing.T, c e2bAPI) {
	if err := isolate.ProbeCriu(isolate.DefaultCriu); err != nil {
		t.Skipf("requires a working criu (make criu): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Create(ctx, CreateOptions{TTL: time.Second, HibernateOnIdle: true})
	if err != nil || !s.HibernateOnIdle {
		t.Fatalf("create with HibernateOnIdle: %+v, %v", s, err)
	}
	defer c.CloseSession(context.WithoutCancel(ctx), s.ID)
	if res, err := c.Exec(ctx, s.ID, "x = 41", nil); err != nil || res.Status != "ok" {
		t.Fatalf("x = 41: %+v, %v", res, err)
	}
	// info does not renew the TTL, so polling it waits for the sweep.
	end := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(ctx, s.ID)
		if err != nil {
			t.Fatalf("info while waiting for the TTL: %v; want the session hibernated, not ended", err)
		}
		if info.State == "hibernated" {
			if !info.HibernateOnIdle {
				t.Errorf("info of the hibernated session: %+v; want hibernate_on_idle", info)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("not hibernated 30 s past its 1 s TTL: %+v", info)
		}
		time.Sleep(100 * time.Millisecond)
	}
	res, err := c.Exec(ctx, s.ID, "x + 1", nil)
	if err != nil || res.Status != "ok" || fmt.Sprint(res.Value["text/plain"]) != "42" {
		t.Fatalf("the cell after the TTL: %+v, %v; want x kept", res, err)
	}
	list, err := c.Sessions(ctx)
	if err != nil || !slices.ContainsFunc(list, func(l Session) bool { return l.ID == s.ID && l.HibernateOnIdle }) {
		t.Errorf("sessions: %+v, %v; want %s with hibernate_on_idle", list, err, s.ID)
	}
}

// TestHibernateOnIdleRefusedByOldServer: a server older than
// hibernate_on_idle ignores it and answers a session that would end at
// its TTL; the client closes that session and refuses the create, and
// sends the field only when asked.
func TestHibernateOnIdleRefusedByOldServer(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	sock := fakeSocket(t, func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		_, asked := body["hibernate_on_idle"]
		mu.Lock()
		sent = append(sent, fmt.Sprintf("%s %s %v", r.Method, r.URL.Path, asked))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true,"session":"n-0123","state":"ready","policy":"default"}`))
	})
	c := NewHTTP(sock)
	defer c.CloseIdleConnections()
	ctx := context.Background()
	if _, err := c.Create(ctx, CreateOptions{HibernateOnIdle: true}); !IsCode(err, "unavailable") || !strings.Contains(err.Error(), "hibernate_on_idle") {
		t.Errorf("create with HibernateOnIdle from a server that ignores it: %v; want unavailable naming the field", err)
	}
	if s, err := c.Create(ctx, CreateOptions{}); err != nil || s.ID != "n-0123" {
		t.Errorf("create without it: %+v, %v", s, err)
	}
	want := []string{"POST /v1/sessions true", "DELETE /v1/sessions/n-0123 false", "POST /v1/sessions false"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(sent, want) {
		t.Errorf("sent %q, want %q", sent, want)
	}
}

// TestCreateBodyMatchesOpenAPI: the create body carries every field of
// the document's CreateRequest, so an option the server gains at create
// fails here until the client passes it on, each with api.Request's JSON
// options.
func TestCreateBodyMatchesOpenAPI(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var props []string
	for p := range doc.Components.Schemas["CreateRequest"].Properties {
		if p != "id" { // the JSON-lines request id, the transport's
			props = append(props, p)
		}
	}
	var mine []string
	theirs := jsonFields(reflect.TypeOf(api.Request{}))
	for p, typ := range jsonFields(reflect.TypeOf(createBody{})) {
		mine = append(mine, p)
		if theirs[p] != typ {
			t.Errorf("createBody.%s is %s, api.Request's is %q", p, typ, theirs[p])
		}
	}
	slices.Sort(props)
	slices.Sort(mine)
	if !slices.Equal(props, mine) {
		t.Errorf("createBody's fields %v, CreateRequest's %v", mine, props)
	}
}
