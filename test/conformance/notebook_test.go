package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/session"
)

func TestMain(m *testing.M) {
	isolate.Init()
	// A jailcell this test starts never reads the host's config or finds
	// its service (make test runs beside one).
	testenv.Hermetic()
	os.Exit(m.Run())
}

const (
	// cgroupRoot is this package's own: a manager reconciles every cgroup
	// under its root, so packages tested in parallel must not share one.
	cgroupRoot = "/jailcell-test-conformance"
	corpusDir  = "../../testdata/notebooks"
	hostPython = "/usr/bin/python3"
	// minAgreement is the share of deterministic cells that must agree:
	// all of them. A cell is deterministic if two Jupyter runs of its
	// notebook agree on it (unseeded random numbers, timings and the like
	// make the others differ in Jupyter itself).
	minAgreement = 1.0
)

type notebook struct {
	Cells []struct {
		Type   string          `json:"cell_type"`
		Source json.RawMessage `json:"source"`
	} `json:"cells"`
}

func loadCells(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var nb notebook
	if err := json.Unmarshal(b, &nb); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var cells []string
	for _, c := range nb.Cells {
		if c.Type != "code" {
			continue
		}
		var lines []string
		if err := json.Unmarshal(c.Source, &lines); err != nil {
			var s string
			if err := json.Unmarshal(c.Source, &s); err != nil {
				t.Fatalf("%s: cell source: %v", path, err)
			}
			lines = []string{s}
		}
		cells = append(cells, strings.Join(lines, ""))
	}
	return cells
}

// requireJupyter skips unless the host has Debian's ipykernel and
// jupyter_client, naming what is missing.
func requireJupyter(t *testing.T) {
	t.Helper()
	out, err := exec.Command(hostPython, "-c", "import ipykernel, jupyter_client, pandas, matplotlib").CombinedOutput()
	if err != nil {
		t.Skipf("requires python3-ipykernel, python3-jupyter-client, pandas and matplotlib in %s (make deps): %v\n%s", hostPython, err, out)
	}
}

func newManager(t *testing.T) *session.Manager {
	t.Helper()
	testenv.RequiresRoot(t)
	r := testenv.Rootfs(t)
	state := testenv.StateDir(t)
	h, err := isolate.NewHost(isolate.Config{StateDir: filepath.Join(state, "isolate"), Rootfs: r.Root, CgroupRoot: cgroupRoot})
	if err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	p := policy.Default()
	p.MemoryBytes = 1 << 30
	p.DiskBytes = 256 << 20
	p.OutputBytes = 1 << 20
	m, err := session.New(session.Config{
		StateDir: filepath.Join(state, "sessions"),
		Policies: map[string]policy.Policy{"default": p},
	}, h)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		// Else the cgroup root stays in every hierarchy after the run.
		if err := h.Close(); err != nil {
			t.Errorf("host Close: %v", err)
		}
	})
	return m
}

func dataFiles(t *testing.T) []session.File {
	t.Helper()
	dir := filepath.Join(corpusDir, "data")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []session.File
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, session.File{Path: e.Name(), Data: b})
	}
	return files
}

// runJupyter runs the notebook with the Jupyter driver in a temporary copy
// of the data directory; it returns the outcomes and that directory.
func runJupyter(nbPath string, files []session.File) ([]Outcome, string, error) {
	dir, err := os.MkdirTemp("", "jc-jupyter-")
	if err != nil {
		return nil, "", err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Path), f.Data, 0o644); err != nil {
			return nil, dir, err
		}
	}
	home, err := os.MkdirTemp("", "jc-jupyter-home-")
	if err != nil {
		return nil, dir, err
	}
	defer os.RemoveAll(home)
	driver, _ := filepath.Abs(filepath.Join(corpusDir, "jupyter_driver.py"))
	abs, _ := filepath.Abs(nbPath)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostPython, driver, abs, dir)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "MPLCONFIGDIR=" + home, "JUPYTER_PLATFORM_DIRS=1", "PYDEVD_DISABLE_FILE_VALIDATION=1"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// A kernel the driver left running holds its pipes: the wait is bounded.
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return nil, dir, fmt.Errorf("jupyter driver: %v\n%s", err, stderr.String())
	}
	var res []Outcome
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, dir, fmt.Errorf("jupyter driver output: %v", err)
	}
	return res, dir, nil
}

func runJailcell(t *testing.T, m *session.Manager, cells []string, files []session.File) []Outcome {
	t.Helper()
	ctx := context.Background()
	info, err := m.Create(ctx, session.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	defer m.Close(context.Background(), 0, info.ID)
	var res []Outcome
	for i, code := range cells {
		req := session.ExecRequest{Code: code, Timeout: 2 * time.Minute}
		if i == 0 {
			req.Files = files
		}
		r, err := m.Exec(ctx, 0, info.ID, req)
		if err != nil {
			t.Fatalf("Exec cell %d: %v", i+1, err)
		}
		o := Outcome{Status: r.Status, Stdout: r.Stdout}
		if r.Error != nil {
			o.Error = r.Error.Type
		}
		if s, ok := r.Value["text/plain"].(string); ok {
			o.Value = &s
		}
		if _, ok := r.Value["image/png"]; ok {
			o.Images++
		}
		for _, d := range r.Display {
			if d.Pager {
				text := d.Data
				if o.Pager != nil {
					text = *o.Pager + text
				}
				o.Pager = &text
				continue
			}
			if _, ok := d.Bundle["image/png"]; ok || d.MIME == "image/png" {
				o.Images++
			}
		}
		res = append(res, o)
	}
	return res
}

func TestNotebookConformance(t *testing.T) {
	requireJupyter(t)
	m := newManager(t)
	files := dataFiles(t)
	// JAILCELL_NOTEBOOKS narrows the run to a glob, e.g. "09_*", while
	// working on one notebook; the suite is only complete without it.
	glob := os.Getenv("JAILCELL_NOTEBOOKS")
	if glob == "" {
		glob = "*"
	} else {
		t.Logf("JAILCELL_NOTEBOOKS=%s: running only those notebooks", glob)
	}
	paths, _ := filepath.Glob(filepath.Join(corpusDir, glob+".ipynb"))
	sort.Strings(paths)
	if len(paths) == 0 {
		t.Fatalf("no notebooks in %s", corpusDir)
	}
	var total, agree, skipped int
	var table, disagreements, unstable []string
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".ipynb")
		cells := loadCells(t, p)
		// One Jupyter run beside the jailcell one, and a second (by Judge)
		// only where they differ, to tell a nondeterministic cell from a
		// disagreement.
		type jres struct {
			out []Outcome
			dir string
			err error
		}
		ch := make(chan jres, 1)
		go func() {
			out, dir, err := runJupyter(p, files)
			ch <- jres{out, dir, err}
		}()
		mine := runJailcell(t, m, cells, files)
		ref := <-ch
		var dirs []string
		if ref.dir != "" {
			dirs = append(dirs, ref.dir)
		}
		if ref.err != nil {
			t.Fatalf("%s: %v", name, ref.err)
		}
		ok, n, odd, err := Judge(ref.out, ref.dir, mine, func() ([]Outcome, string, error) {
			out, dir, err := runJupyter(p, files)
			if dir != "" {
				dirs = append(dirs, dir)
			}
			return out, dir, err
		})
		for _, d := range dirs {
			os.RemoveAll(d)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, o := range odd {
			first := strings.SplitN(cells[o.Cell], "\n", 2)[0]
			line := fmt.Sprintf("%s cell %d (%s): %s", name, o.Cell+1, first, o.Diff)
			if o.Unstable {
				unstable = append(unstable, line)
			} else {
				disagreements = append(disagreements, line)
			}
		}
		total += n
		agree += ok
		skipped += len(mine) - n
		table = append(table, fmt.Sprintf("%-26s %3d/%3d  %5.1f%%  (%d nondeterministic)", name, ok, n, 100*float64(ok)/float64(max(n, 1)), len(mine)-n))
	}
	if total == 0 {
		t.Fatalf("no deterministic cells in %s", corpusDir)
	}
	share := float64(agree) / float64(total)
	t.Logf("notebook conformance, jailcell vs Jupyter (ipykernel), deterministic cells:\n%-26s %s\n%s\n%-26s %3d/%3d  %5.1f%%  (%d nondeterministic)",
		"notebook", "agree", strings.Join(table, "\n"), "total", agree, total, 100*share, skipped)
	for _, d := range unstable {
		t.Logf("nondeterministic in Jupyter, left out: %s", d)
	}
	for _, d := range disagreements {
		t.Logf("disagreement: %s", d)
	}
	if share < minAgreement {
		t.Errorf("agreement %.1f%% < %.0f%%", 100*share, 100*minAgreement)
	}
}
