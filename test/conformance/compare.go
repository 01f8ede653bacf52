package conformance

// The comparison of two kernels' cells, shared by this package's suite
// (cell by cell through the session API) and test/jupyter (whole notebooks
// through nbclient on the jailcell Jupyter kernel): one rule for both.

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jailcell/jailcell/internal/termtext"
	"github.com/jailcell/jailcell/session"
)

// Outcome is what one cell produced, in either kernel: the fields an
// agent reads, and the ones compared.
type Outcome struct {
	Status     string  `json:"status"`
	Error      string  `json:"error"`       // exception type, when status is error
	ShownError string  `json:"shown_error"` // Jupyter only: a traceback a magic showed
	Stdout     string  `json:"stdout"`
	Value      *string `json:"value"`
	Images     int     `json:"images"`
	// Pager is what the cell sent to IPython's pager: Jupyter's `page`
	// payloads, jailcell's display items marked pager.
	Pager *string `json:"pager"`
}

var (
	addrRE   = regexp.MustCompile(`0x[0-9a-fA-F]{6,}`)
	timingRE = regexp.MustCompile(`[0-9][0-9.,]*\s*(ns|µs|us|ms|s|seconds|min)\b`)
	// %prun's table: ncalls, then tottime, percall, cumtime and percall in
	// seconds, which depend on the machine's load, not the kernel.
	profRowRE = regexp.MustCompile(`(?m)^(\s*[0-9]+(?:/[0-9]+)?)\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s`)
	timeitRE  = regexp.MustCompile(`\(mean ± std\. dev\. of .*\)`)
	spacingRE = regexp.MustCompile(`[ \t]+`)
	// %timeit's warning depends on the machine's noise, not the kernel.
	slowestRE = regexp.MustCompile(`The slowest run took .*\n`)
	// Where each kernel files a cell's code (pdb, obj?): ipykernel's
	// temporary file, jailcell's <cell-N> (which obj?'s File: line shows
	// under the working directory, as IPython makes every path absolute).
	cellFileRE = regexp.MustCompile(`/tmp/ipykernel_[0-9]+/[0-9]+\.py|(<cwd>/)?<cell-[0-9]+>`)
)

// Normalise removes what legitimately differs between two runs: timings,
// object addresses, the working directory, terminal colours.
func Normalise(s, workdir string) string {
	// As a terminal shows it, as jailcell cleans it by default: no escape
	// sequences, and "\r\n" (also the "\r\r\n" a pty makes of a file's
	// "\r\n") as "\n".
	s = termtext.Clean(s)
	if workdir != "" {
		s = strings.ReplaceAll(s, workdir, "<cwd>")
	}
	s = strings.ReplaceAll(s, session.Workdir, "<cwd>")
	s = slowestRE.ReplaceAllString(s, "")
	s = cellFileRE.ReplaceAllString(s, "<cell>")
	s = addrRE.ReplaceAllString(s, "0x?")
	s = timeitRE.ReplaceAllString(s, "(...)")
	s = timingRE.ReplaceAllString(s, "<t>")
	s = profRowRE.ReplaceAllString(s, "$1 <t> <t> <t> <t> ")
	s = spacingRE.ReplaceAllString(s, " ")
	return strings.TrimSpace(s)
}

// ShellFailed reports jailcell's one intended difference from Jupyter: a
// `!cmd` or %pip that exits non-zero ends the cell with
// CalledProcessError where IPython only sets _exit_code and goes on (issue
// 26: a failed %pip install looked like a working one). Such a cell's
// status, error and value are not compared (the lines after the command
// did not run); its stdout, the command's output, still is.
func ShellFailed(j, c Outcome) bool {
	return j.Status == session.StatusOK && c.Status == session.StatusError && shortType(c.Error) == "CalledProcessError"
}

func shortType(s string) string {
	return s[strings.LastIndex(s, ".")+1:]
}

// Diff says how cell c differs from cell j, "" if not; jdir and cdir are
// the working directories each ran in.
func Diff(j, c Outcome, jdir, cdir string) string {
	var why []string
	shellFailed := ShellFailed(j, c)
	if j.Status != c.Status && !shellFailed {
		why = append(why, fmt.Sprintf("status %s vs %s", j.Status, c.Status))
	}
	if shortType(j.Error) != shortType(c.Error) && !shellFailed {
		why = append(why, fmt.Sprintf("error %q vs %q", j.Error, c.Error))
	}
	if js, cs := Normalise(j.Stdout, jdir), Normalise(c.Stdout, cdir); js != cs {
		why = append(why, fmt.Sprintf("stdout %q vs %q", js, cs))
	}
	jv, cv := "<none>", "<none>"
	if j.Value != nil {
		jv = Normalise(*j.Value, jdir)
	}
	if c.Value != nil {
		cv = Normalise(*c.Value, cdir)
	}
	if jv != cv && !shellFailed {
		why = append(why, fmt.Sprintf("value %q vs %q", jv, cv))
	}
	if j.Images != c.Images {
		why = append(why, fmt.Sprintf("images %d vs %d", j.Images, c.Images))
	}
	jp, cp := "<none>", "<none>"
	if j.Pager != nil {
		jp = Normalise(*j.Pager, jdir)
	}
	if c.Pager != nil {
		cp = Normalise(*c.Pager, cdir)
	}
	if jp != cp {
		why = append(why, fmt.Sprintf("pager %q vs %q", jp, cp))
	}
	return strings.Join(why, "; ")
}

// Odd is a cell on which jailcell differed from Jupyter's first run.
type Odd struct {
	Cell     int    // its index among the notebook's code cells
	Diff     string // how it differed: from Jupyter's first run, or between Jupyter's two
	Unstable bool   // Jupyter's two runs differ on it: left out
}

// Judge compares jailcell's outcomes (mine) with a Jupyter run of the same
// notebook (ref, run in refDir). A cell on which they differ is looked at
// again in a second Jupyter run, made on first need by again: if Jupyter's
// two runs differ on it, it is nondeterministic in Jupyter itself (unseeded
// random numbers, uninitialised memory) and left out; else it is a
// disagreement. judged counts the cells not left out, agree those of them
// jailcell agrees on. Jupyter runs a second time only for a notebook that
// needs it (one of the corpus's twelve): two runs of every notebook spent a
// third of the conformance tests' time.
func Judge(ref []Outcome, refDir string, mine []Outcome, again func() ([]Outcome, string, error)) (agree, judged int, odd []Odd, err error) {
	if len(ref) != len(mine) {
		return 0, 0, nil, fmt.Errorf("%d cells in Jupyter, %d in jailcell", len(ref), len(mine))
	}
	var second []Outcome
	var secondDir string
	for i := range mine {
		d := Diff(ref[i], mine[i], refDir, "")
		if d == "" {
			agree++
			judged++
			continue
		}
		if second == nil {
			if second, secondDir, err = again(); err != nil {
				return 0, 0, nil, err
			}
			if len(second) != len(ref) {
				return 0, 0, nil, fmt.Errorf("%d cells in Jupyter's second run, %d in its first", len(second), len(ref))
			}
		}
		if u := Diff(ref[i], second[i], refDir, secondDir); u != "" {
			odd = append(odd, Odd{Cell: i, Diff: u, Unstable: true})
			continue
		}
		judged++
		odd = append(odd, Odd{Cell: i, Diff: d})
	}
	return agree, judged, odd, nil
}
