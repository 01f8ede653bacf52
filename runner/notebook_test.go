package runner

import (
	"strings"
	"testing"
)

// Notebook semantics: these need Debian's python3-ipython on the host (the
// rootfs has it too; the session and conformance tests cover it there).

func TestNotebookMagics(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)

	// A cell without magics must not load IPython: cold cells stay cheap.
	r := k.exec("import sys\n'IPython' in sys.modules")
	requireOK(t, r)
	if plain(r) != "False" {
		t.Fatalf("IPython loaded by a plain cell: %q", plain(r))
	}

	r = k.exec("%matplotlib inline\nimport math\nx = 21")
	requireOK(t, r)
	if r.Stdout != "" || r.Stderr != "" {
		t.Errorf("%%matplotlib inline printed %q %q", r.Stdout, r.Stderr)
	}

	r = k.exec("%time y = x * 2\ny")
	requireOK(t, r)
	if plain(r) != "42" || !strings.Contains(r.Stdout, "Wall time") {
		t.Errorf("%%time: value %q stdout %q", plain(r), r.Stdout)
	}

	r = k.exec("!echo hello $x\nfiles = !echo a; echo b\nfiles")
	requireOK(t, r)
	if !strings.Contains(r.Stdout, "hello 21") || !strings.Contains(plain(r), "'a'") {
		t.Errorf("shell escape: stdout %q value %q", r.Stdout, plain(r))
	}

	r = k.exec("%%writefile notes.txt\nline one\n")
	requireOK(t, r)
	if !strings.Contains(r.Stdout, "Writing notes.txt") {
		t.Errorf("%%%%writefile stdout %q", r.Stdout)
	}
	r = k.exec("open('notes.txt').read()")
	if plain(r) != `'line one\n'` {
		t.Errorf("written file %q", plain(r))
	}

	r = k.exec("%%capture cap\nprint('hidden')")
	requireOK(t, r)
	if r.Stdout != "" {
		t.Errorf("%%%%capture leaked %q", r.Stdout)
	}
	r = k.exec("cap.stdout")
	if plain(r) != `'hidden\n'` {
		t.Errorf("captured %q", plain(r))
	}

	r = k.exec("%who_ls")
	requireOK(t, r)
	if !strings.Contains(plain(r), "'x'") || strings.Contains(plain(r), "'Out'") {
		t.Errorf("%%who_ls = %q", plain(r))
	}

	r = k.exec("%pwd")
	requireOK(t, r)
	if !strings.HasPrefix(plain(r), "'/") {
		t.Errorf("%%pwd = %q", plain(r))
	}

	r = k.exec("%timeit -n 3 -r 1 sum(range(10))")
	requireOK(t, r)
	if !strings.Contains(r.Stdout, "per loop") {
		t.Errorf("%%timeit stdout %q", r.Stdout)
	}

	// A magic in an error cell: the exception is the user's.
	// An exception the magic catches itself: shown, but the cell succeeds,
	// as in Jupyter.
	r = k.exec("%time 1/0")
	requireOK(t, r)
	if !strings.Contains(r.Stderr, "ZeroDivisionError") {
		t.Errorf("%%time 1/0 stderr %q", r.Stderr)
	}

	r = k.exec("%nosuchmagic")
	requireError(t, r, "IPython.core.error.UsageError")
}

func TestNotebookHistoryAndQuiet(t *testing.T) {
	requirePython(t)
	k := startKernel(t)
	requireOK(t, k.exec("6 * 7"))
	requireOK(t, k.exec("'second'"))
	r := k.exec("(_, __, Out[1])")
	if plain(r) != "('second', 42, 42)" {
		t.Errorf("history = %q", plain(r))
	}
	r = k.exec("x = [1, 2]\nx;")
	if r.Value != nil {
		t.Errorf("a trailing ';' must hide the value, got %q", plain(r))
	}
	r = k.exec("_ = 'mine'\n5")
	r = k.exec("_")
	if plain(r) != "'mine'" {
		t.Errorf("a user-assigned _ was overwritten: %q", plain(r))
	}
}

func TestNotebookDisplay(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)
	r := k.exec("from IPython.display import display, HTML, Markdown\n" +
		"display(HTML('<b>x</b>'))\ndisplay(Markdown('*y*'))\nprint('after')")
	requireOK(t, r)
	if len(r.Display) != 2 || r.Display[0].MIME != "text/html" || r.Display[1].MIME != "text/markdown" {
		t.Fatalf("display items %+v", r.Display)
	}
	if r.Stdout != "after\n" {
		t.Errorf("stdout %q", r.Stdout)
	}
	// Once IPython is loaded, values read as in Jupyter: pretty-printed.
	r = k.exec("{3, 1, 2}")
	if plain(r) != "{1, 2, 3}" {
		t.Errorf("pretty set %q", plain(r))
	}
}

func TestNotebookPlotShow(t *testing.T) {
	requireModule(t, "matplotlib")
	requireModule(t, "IPython")
	k := startKernel(t)
	r := k.exec("%matplotlib inline\nimport matplotlib.pyplot as plt\n" +
		"for i in range(3):\n    plt.figure()\n    plt.plot([0, i])\n    plt.show()\n" +
		"fig, ax = plt.subplots()\nax.plot([1, 2]);")
	requireOK(t, r)
	n := 0
	for _, d := range r.Display {
		if d.MIME == "image/png" {
			n++
		}
	}
	if n != 4 || r.Value != nil {
		t.Errorf("%d images (want 4: three shows and one at the end), value %v", n, r.Value)
	}
}
