package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/store"
)

// Every kind of probe problem has its doctor check, matched by kind: the
// words may change (they used to be matched by substring), the kind not.
func TestDoctorPlacesProblemsByID(t *testing.T) {
	var f isolate.Features
	checks := []*check{checkUserNS(f), checkOverlay(f), checkIDMap(f), checkControllers(f), checkSwap(f), checkSeccomp(f)}
	ids := []isolate.ProblemID{isolate.ProblemUserNS, isolate.ProblemOverlay, isolate.ProblemIDMap,
		isolate.ProblemCgroupController, isolate.ProblemSwapAccounting, isolate.ProblemSeccomp}
	for i, id := range ids {
		for _, c := range checks {
			c.status = statusOK
		}
		// Words that name no check, or another one: only the ID counts.
		got := placeProblems(checks, []isolate.Problem{{ID: id, Text: "words naming swap and seccomp"}})
		if len(got) != len(checks) {
			t.Errorf("problem %s not placed: became its own line", id)
			continue
		}
		for j, c := range checks {
			if (c.status == statusFail) != (i == j) {
				t.Errorf("problem %s: check %s status %s", id, c.name, c.status)
			}
		}
	}
	got := placeProblems(nil, []isolate.Problem{{ID: "new_kind", Text: "something new"}})
	if len(got) != 1 || got[0].status != statusFail || got[0].found != "something new" {
		t.Errorf("an unknown kind is dropped or wrong: %+v", got)
	}
}

// TestDoctorStoreSigned: doctor's store round trip goes through the fleet
// key's signature, and a shared store without one is reported with the
// key to set.
func TestDoctorStoreSigned(t *testing.T) {
	c := doctorStore(store.Options{URL: "file://" + t.TempDir(), Shared: true, KeyFile: storeKeyFile(t)})
	if c.status != statusOK || !strings.Contains(c.found, `signed with fleet key "fleet-test"`) {
		t.Fatalf("signed store: %s %s", c.status, c.found)
	}
	c = doctorStore(store.Options{URL: "file://" + t.TempDir(), Shared: true})
	if c.status != statusWarn || !strings.Contains(c.found, "store.key_file") {
		t.Fatalf("shared store without a key: %s %s", c.status, c.found)
	}
}

// TestDoctorServiceNotHereIsANote: with no service listening (its socket
// directory left 0700 by a daemon's uid claims, no socket), the service's
// lines are notes, not failures; the same directory in front of a
// listening service is a failure its clients would hit.
func TestDoctorServiceNotHereIsANote(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(filepath.Join(dir, "claims"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := &config{Socket: filepath.Join(dir, "j.sock"), SocketGroup: "root", sources: map[string]string{}}
	for _, c := range serviceChecks(cfg) {
		if c.status == statusFail || c.status == statusWarn && c.name != "systemd units" {
			t.Errorf("no service here: %s is %s (%s)", c.name, c.status, c.found)
		}
		if c.name == "socket dir" && c.status != statusNote {
			t.Errorf("no service here: socket dir is %s, want note", c.status)
		}
	}
	l, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := map[string]string{}
	for _, c := range serviceChecks(cfg) {
		got[c.name] = c.status
	}
	if got["socket dir"] != statusFail {
		t.Errorf("a listening service behind a 0700 directory: socket dir is %s, want FAIL", got["socket dir"])
	}
}

// TestDoctorWarnsOfHostSettingsCellsCanUse: a core_pattern that pipes to
// a helper (every crash in a cell starts it as root, outside the
// sandbox's limits; RLIMIT_CORE 0 does not stop a pipe) is a warning
// naming the fix; a file pattern is ok. (Huge pages need no check: the
// filter refuses a sandbox the calls that take them.)
func TestDoctorWarnsOfHostSettingsCellsCanUse(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		c    *check
		want string
	}{
		{checkCorePattern(write("pipe", "|/usr/share/apport/apport -p%p")), statusWarn},
		{checkCorePattern(write("file", "core")), statusOK},
	} {
		if tc.c.status != tc.want || tc.want == statusWarn && tc.c.fix == "" {
			t.Errorf("%s: %s %q (fix %q), want %s with a fix", tc.c.name, tc.c.status, tc.c.found, tc.c.fix, tc.want)
		}
	}
}
