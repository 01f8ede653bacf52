package session

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/runner"
)

// TestZZImgSize hibernates a loaded session and reports its image before any
// restore. ZZ_PRE: extra cell run before hibernate. ZZ_ENV: extra sandbox
// env entries, ';'-separated. ZZ_KPATCH: python file whose content replaces
// "# ZZ_HOOK" ... appended to kernel script (a snippet inserted before
// `def main`). ZZ_OUT: directory to copy the images to.
func TestZZImgSize(t *testing.T) {
	r := newRestartable(t)
	requiresCriu(t)
	ctx := context.Background()
	if e := os.Getenv("ZZ_ENV"); e != "" {
		old := sandboxEnv
		sandboxEnv = append(append([]string{}, sandboxEnv...), strings.Split(e, ";")...)
		defer func() { sandboxEnv = old }()
	}
	if p := os.Getenv("ZZ_KSCRIPT"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		old := runner.Script
		runner.Script = b
		defer func() { runner.Script = old }()
	}
	m := r.start(false)
	defer m.Shutdown(ctx)
	info, err := m.Create(ctx, CreateOptions{Owner: 1000})
	if err != nil {
		t.Fatal(err)
	}
	state := hibernateState
	if os.Getenv("ZZ_NOSTATE") != "" {
		state = "x = 1\n"
	}
	if st := os.Getenv("ZZ_STATE"); st != "" {
		state = st
	}
	if res, err := m.Exec(ctx, 1000, info.ID, ExecRequest{Code: state}); err != nil || res.Status != StatusOK {
		t.Fatalf("first cell: %v %+v", err, res)
	}
	if pre := os.Getenv("ZZ_PRE"); pre != "" {
		res, err := m.Exec(ctx, 1000, info.ID, ExecRequest{Code: pre})
		if err != nil || res.Status != StatusOK {
			t.Fatalf("pre cell: %v %+v", err, res)
		}
		t.Logf("pre cell stdout: %s", res.Stdout)
	}
	m.mu.Lock()
	s := m.sessions[info.ID]
	m.mu.Unlock()
	s.mu.Lock()
	pid := s.k.sb.Pid()
	s.mu.Unlock()
	pids := []int{pid}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
	}
	out := os.Getenv("ZZ_OUT")
	for _, p := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", p))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		th, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		t.Logf("pid %d threads %d cmd %q\n%s", p, len(th), strings.ReplaceAll(string(cmd), "\x00", " "), b)
		if out != "" {
			_ = os.MkdirAll(out, 0o755)
			sm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", p))
			_ = os.WriteFile(filepath.Join(out, fmt.Sprintf("smaps-%d", p)), sm, 0o644)
		}
	}
	if _, err := m.Hibernate(1000, info.ID); err != nil {
		t.Fatalf("Hibernate: %v", err)
	}
	images := filepath.Join(r.state, "sessions", "sessions", info.ID, imagesName)
	ents, _ := os.ReadDir(images)
	type fsz struct {
		n string
		s int64
	}
	var fs []fsz
	var total int64
	for _, e := range ents {
		fi, _ := e.Info()
		if fi.Mode().IsRegular() {
			fs = append(fs, fsz{e.Name(), fi.Size()})
			total += fi.Size()
		}
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].s > fs[j].s })
	var sb strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&sb, "  %12d %s\n", f.s, f.n)
	}
	t.Logf("ZZIMG label=%s total %d bytes = %.2f MiB = %.2f MB\n%s", os.Getenv("ZZ_LABEL"), total, float64(total)/(1<<20), float64(total)/1e6, sb.String())
	if out != "" {
		_ = exec.Command("cp", "-a", images, filepath.Join(out, "images")).Run()
	}
	if os.Getenv("ZZ_RESTORE") != "" {
		ri, err := m.Restore(ctx, 1000, info.ID)
		if err != nil || ri.State != "ready" {
			t.Fatalf("Restore: %v %+v", err, ri)
		}
		res, err := m.Exec(ctx, 1000, info.ID, ExecRequest{Code: "print(thing.tag, len(df), a.sum())"})
		t.Logf("after restore: %v %q %q", err, res.Stdout, res.Stderr)
	}
}
