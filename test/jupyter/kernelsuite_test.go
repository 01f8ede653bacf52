package jupyter

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// kernelSuiteTests are the tests of jupyter_kernel_test 0.4.5, Debian's
// python3-jupyter-kernel-test; another version with other tests fails
// TestJupyterKernelTestSuite until this list is brought up to date.
var kernelSuiteTests = []string{
	"test_clear_output", "test_completion", "test_display_data", "test_error", "test_execute_result",
	"test_execute_stderr", "test_execute_stdout", "test_history", "test_inspect", "test_is_complete",
	"test_kernel_info", "test_pager",
}

// requireKernelTestSuite skips unless the host Python has
// jupyter_kernel_test, naming the package (make deps installs it).
func requireKernelTestSuite(t *testing.T) {
	t.Helper()
	requireJupyter(t)
	out, err := exec.Command(hostPython, "-c", "import jupyter_kernel_test").CombinedOutput()
	if err != nil {
		t.Skipf("requires python3-jupyter-kernel-test in %s (make deps): %v\n%s", hostPython, err, out)
	}
}

// suiteReport is kernelsuite.py's JKT-RESULT line.
type suiteReport struct {
	Version     string            `json:"version"`
	TestsRun    int               `json:"tests_run"`
	Seconds     float64           `json:"seconds"`
	Outcomes    map[string]string `json:"outcomes"`
	Notes       map[string]string `json:"notes"`
	ClassErrors []string          `json:"class_errors"`
}

var reportLine = regexp.MustCompile(`(?m)^JKT-RESULT (\{.*\})$`)

// parseSuiteReport reads kernelsuite.py's report from its output and
// lists every test of kernelSuiteTests that did not pass, with why: a
// failure, an error, a skip (of the test or one of its subtests), or no
// outcome at all.
func parseSuiteReport(out string) (*suiteReport, []string, error) {
	m := reportLine.FindStringSubmatch(out)
	if m == nil {
		return nil, nil, fmt.Errorf("no JKT-RESULT line in the suite's output")
	}
	var r suiteReport
	if err := json.Unmarshal([]byte(m[1]), &r); err != nil {
		return nil, nil, fmt.Errorf("decode JKT-RESULT: %w", err)
	}
	var bad []string
	for _, name := range kernelSuiteTests {
		switch o := r.Outcomes[name]; o {
		case "pass":
		case "":
			bad = append(bad, name+": no outcome (not run)")
		default:
			bad = append(bad, fmt.Sprintf("%s: %s: %s", name, o, strings.TrimSpace(r.Notes[name])))
		}
	}
	var extra []string
	for name := range r.Outcomes {
		if !contains(kernelSuiteTests, name) {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		bad = append(bad, fmt.Sprintf("%s: a test this list does not know (%s)", name, r.Outcomes[name]))
	}
	for _, e := range r.ClassErrors {
		bad = append(bad, "setUpClass: "+e)
	}
	return &r, bad, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestJupyterKernelTestSuite runs the Jupyter project's own kernel test
// suite, jupyter_kernel_test (kernelsuite.py: its ipykernel test's
// samples, range history included), on the jailcell kernel: the real
// binary's kernelspec on a temporary JUPYTER_PATH, started by
// jupyter_client as a user who is not root, its cells in a real sandbox
// of a real service. All 12 tests must pass, with no test or subtest
// skipped; the failing ones are listed with the suite's reason.
func TestJupyterKernelTestSuite(t *testing.T) {
	requireKernelTestSuite(t)
	f := setup(t)
	f.copyScript(t, "kernelsuite.py")
	start := time.Now()
	out, err := f.try(15*time.Minute, hostPython, filepath.Join(f.dir, "kernelsuite.py"), kernelName, filepath.Join(f.jupyterDir, "kernels"))
	took := time.Since(start)
	t.Logf("jupyter_kernel_test on the jailcell kernel, %.1f s in all:\n%s", took.Seconds(), tail(out, 40))
	r, bad, perr := parseSuiteReport(out)
	if perr != nil {
		t.Fatalf("%v (exit: %v)", perr, err)
	}
	t.Logf("jupyter_kernel_test %s: %d tests in %.1f s (kernel start included)", r.Version, r.TestsRun, r.Seconds)
	if len(bad) > 0 {
		t.Fatalf("%d of %d tests of jupyter_kernel_test did not pass on the jailcell kernel:\n%s", len(bad), len(kernelSuiteTests), strings.Join(bad, "\n"))
	}
	if r.TestsRun != len(kernelSuiteTests) {
		t.Fatalf("the suite ran %d tests, want %d", r.TestsRun, len(kernelSuiteTests))
	}
	if err != nil {
		t.Fatalf("every test passed, but the suite exited with %v", err)
	}
}

// TestParseSuiteReport: the report parser fails a run that is not 12 of
// 12 and says which tests and why: a failed or skipped subtest, a test
// missing or unknown, a setUpClass error, no report at all.
func TestParseSuiteReport(t *testing.T) {
	all := map[string]string{}
	for _, n := range kernelSuiteTests {
		all[n] = "pass"
	}
	line := func(outcomes map[string]string, notes map[string]string, classErrors ...string) string {
		b, _ := json.Marshal(suiteReport{Version: "0.4.5", TestsRun: len(outcomes), Outcomes: outcomes, Notes: notes, ClassErrors: classErrors})
		return "test_x ... ok\nJKT-RESULT " + string(b) + "\n"
	}
	with := func(changes map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range all {
			m[k] = v
		}
		for k, v := range changes {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	for _, tc := range []struct {
		name, out string
		bad       []string // substrings, one per listed test
		err       bool
	}{
		{"12 of 12", line(all, nil), nil, false},
		{"a failed subtest", line(with(map[string]string{"test_history": "fail"}), map[string]string{"test_history": "(hist_access_type='search'): AssertionError: 0 not greater than or equal to 1"}),
			[]string{"test_history: fail: (hist_access_type='search')"}, false},
		{"skips and errors", line(with(map[string]string{"test_clear_output": "skip", "test_pager": "error"}), nil),
			[]string{"test_clear_output: skip", "test_pager: error"}, false},
		{"a test not run", line(with(map[string]string{"test_inspect": ""}), nil), []string{"test_inspect: no outcome"}, false},
		{"an unknown test", line(with(map[string]string{"test_debugger": "pass"}), nil), []string{"test_debugger: a test this list does not know"}, false},
		{"setUpClass failed", line(map[string]string{}, nil, "kernel died"), append(make([]string, 12), "setUpClass: kernel died"), false},
		{"no report", "Traceback ...\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, bad, err := parseSuiteReport(tc.out)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			if len(bad) != len(tc.bad) {
				t.Fatalf("listed %q, want %d entries", bad, len(tc.bad))
			}
			for i, want := range tc.bad {
				if !strings.Contains(bad[i], want) {
					t.Errorf("entry %d %q, want it to contain %q", i, bad[i], want)
				}
			}
		})
	}
}

// TestJupyterHistoryClearOutput goes past the suite (histclear.py): the
// clear_output iopub message in its place among the streams, with wait
// false and true, through the service's streamed exec; history tail with
// outputs (the value's text/plain; null for an error), silent,
// store_history=False and blank cells left out; range by session 0 and 1
// with a negative start; search with a set, unique (the latest of each)
// and n; a bad pattern and access type answered with an error naming them.
func TestJupyterHistoryClearOutput(t *testing.T) {
	requireJupyter(t)
	f := setup(t)
	f.copyScript(t, "histclear.py")
	out := f.run(t, 10*time.Minute, hostPython, filepath.Join(f.dir, "histclear.py"), kernelName, filepath.Join(f.jupyterDir, "kernels"))
	t.Logf("histclear.py:\n%s", tail(out, 20))
	for _, step := range []string{"start", "clear_output", "history tail", "history range", "history search", "history errors"} {
		if !regexp.MustCompile(`(?m)^ok ` + step + `$`).MatchString(out) {
			t.Errorf("step %q did not pass", step)
		}
	}
}
