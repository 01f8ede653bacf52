package session

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/isolate"
)

// exportedErrs lists the exported Err* package variables declared in the
// non-test Go files of dir.
func exportedErrs(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

// declared maps each Err* variable dir declares to its value in known,
// failing t for one known lacks: a sentinel added without a row here.
func declared(t *testing.T, dir string, known map[string]error) map[string]error {
	t.Helper()
	out := map[string]error{}
	for _, name := range exportedErrs(t, dir) {
		v, ok := known[name]
		if !ok {
			t.Errorf("%s declares %s, which this test's table lacks (and so maybe hostSentinels or sentinels)", dir, name)
			continue
		}
		out[name] = v
	}
	return out
}

// isolateSentinels is every isolate sentinel, by name; the test below
// fails when isolate declares one this list (and so hostSentinels) lacks.
var isolateSentinels = map[string]error{
	"ErrUnsupported": isolate.ErrUnsupported,
	"ErrNotFound":    isolate.ErrNotFound,
	"ErrNotMounted":  isolate.ErrNotMounted,
	"ErrExhausted":   isolate.ErrExhausted,
	"ErrCopyBudget":  isolate.ErrCopyBudget,
	"ErrTimeout":     isolate.ErrTimeout,
	"ErrBusy":        isolate.ErrBusy,
	"ErrPosture":     isolate.ErrPosture,
	// cmd's alone (DelegatedRoot, ClaimUIDRange, Host.Ready behind
	// /readyz): no session operation returns them.
	"ErrNotDelegated":  nil,
	"ErrUIDRangeTaken": nil,
	"ErrNotReady":      nil,
}

var sessionSentinels = map[string]error{
	"ErrNotFound":    ErrNotFound,
	"ErrBusy":        ErrBusy,
	"ErrLimit":       ErrLimit,
	"ErrBadRequest":  ErrBadRequest,
	"ErrUnavailable": ErrUnavailable,
	"ErrShutdown":    ErrShutdown,
	"ErrStateQuota":  ErrStateQuota,
	"ErrStoreQuota":  ErrStoreQuota,
	"ErrLost":        ErrLost, // an ErrNotFound that says the session was lost
	"ErrExpired":     ErrExpired,
}

// oneSentinel says which session sentinels err is, and fails t unless it
// is exactly one.
func oneSentinel(t *testing.T, what string, err error) error {
	t.Helper()
	var is []error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			is = append(is, s)
		}
	}
	if len(is) != 1 {
		t.Fatalf("%s is %d session sentinels %v, want exactly one", what, len(is), is)
	}
	return is[0]
}

// Every isolate sentinel that can come through session becomes exactly one
// session sentinel, whether session wraps it (hostErr) or passes it on
// bare (Sentinel, which the API asks).
func TestHostSentinelsWrapped(t *testing.T) {
	for name, host := range declared(t, "../isolate", isolateSentinels) {
		if host == nil {
			continue
		}
		bare := fmt.Errorf("op: %w", host)
		want := Sentinel(bare)
		if want == nil {
			t.Errorf("isolate.%s maps to no session sentinel", name)
			continue
		}
		for _, fallback := range []error{ErrUnavailable, ErrLimit} {
			got := oneSentinel(t, "hostErr(isolate."+name+")", hostErr(fallback, bare))
			if got != want {
				t.Errorf("isolate.%s: hostErr gives %v, Sentinel %v: one condition, two sentinels", name, got, want)
			}
			if !errors.Is(hostErr(fallback, bare), host) {
				t.Errorf("hostErr dropped isolate.%s from the chain", name)
			}
		}
	}
	// Slot exhaustion is one condition through NewDisk and ReplaceDisk.
	if s := Sentinel(isolate.ErrExhausted); s != ErrLimit {
		t.Errorf("slot exhaustion is %v, want ErrLimit", s)
	}
	// An error that already carries a session sentinel keeps it alone.
	q := fmt.Errorf("copy: %w", ErrStateQuota)
	if got := oneSentinel(t, "hostErr(ErrStateQuota)", hostErr(ErrUnavailable, q)); got != ErrLimit {
		t.Errorf("hostErr(ErrStateQuota) is %v", got)
	}
	if got := hostErr(ErrUnavailable, errors.New("disk on fire")); !errors.Is(got, ErrUnavailable) {
		t.Errorf("hostErr of a plain error: %v, want the fallback", got)
	}
}

// Every session sentinel is exactly one of the sentinels Sentinel knows.
func TestSessionSentinelsKnown(t *testing.T) {
	for name, s := range declared(t, ".", sessionSentinels) {
		oneSentinel(t, "session."+name, s)
		if Sentinel(s) == nil {
			t.Errorf("Sentinel(session.%s) = nil", name)
		}
	}
	if got, want := len(Sentinels()), len(sentinels); got != want {
		t.Errorf("Sentinels() has %d, want %d", got, want)
	}
}
