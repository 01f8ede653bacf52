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

// Jupyter fidelity: each behaviour below is what Debian's ipykernel 6.17
// (IPython 8.5, pandas 1.5) does; testdata/notebooks/09_fidelity.ipynb
// compares the same cells against a live ipykernel.

func TestNotebookFidelityWideFrames(t *testing.T) {
	requireModule(t, "pandas")
	k := startKernel(t)
	r := k.exec("import sys\nimport pandas as pd\n" +
		"wide = pd.DataFrame({'column_%d' % i: range(3) for i in range(15)})\n" +
		"(pd.get_option('display.max_columns'), 'IPython' in sys.modules)")
	requireOK(t, r)
	// 20 is pandas' default under a Jupyter kernel, 0 (fit the terminal)
	// outside one; and the probe must not have loaded IPython.
	if plain(r) != "(20, False)" {
		t.Errorf("max_columns and IPython loaded = %q, want (20, False)", plain(r))
	}
	r = k.exec("wide")
	requireOK(t, r)
	v := plain(r)
	if strings.Contains(v, "...") || !strings.Contains(v, "column_14") || !strings.Contains(v, `\`) {
		t.Errorf("a 15-column frame must wrap in blocks with every column, as in Jupyter:\n%s", v)
	}
	r = k.exec("import numpy as np\npd.DataFrame(np.arange(90).reshape(3, 30))")
	requireOK(t, r)
	if v := plain(r); !strings.Contains(v, "...") || !strings.Contains(v, "[3 rows x 30 columns]") {
		t.Errorf("a 30-column frame must elide past 20 columns:\n%s", v)
	}
}

func TestNotebookFidelityPretty(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)
	// Values whose pretty form is their repr need no IPython.
	for _, c := range []struct{ code, want string }{
		{"[1, 'a', (2.5, None), {'k': b'v'}]", "[1, 'a', (2.5, None), {'k': b'v'}]"},
		{"'x' * 100", "'" + strings.Repeat("x", 100) + "'"},
		{"import sys\n'IPython' in sys.modules", "False"},
	} {
		r := k.exec(c.code)
		requireOK(t, r)
		if plain(r) != c.want {
			t.Errorf("%s = %q, want %q", c.code, plain(r), c.want)
		}
	}
	for _, c := range []struct{ code, want string }{
		{"type(1)", "int"},
		{"[bool, str]", "[bool, str]"},
		{"list(range(30))", "[0,\n 1,\n 2,"},
		{"{'key%d' % i: i for i in range(12)}", "{'key0': 0,\n 'key1': 1,"},
		{"{'banana', 'apple', 'cherry'}", "{'apple', 'banana', 'cherry'}"},
		{"def f(x, y=2):\n    return x\nf", "<function __main__.f(x, y=2)>"},
		{"class Foo:\n    pass\nFoo()", "<__main__.Foo at 0x"},
	} {
		r := k.exec(c.code)
		requireOK(t, r)
		if !strings.HasPrefix(plain(r), c.want) {
			t.Errorf("%s = %q, want it to start with %q", c.code, plain(r), c.want)
		}
	}
}

func TestNotebookFidelityPager(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)
	requireOK(t, k.exec("def f(x, y=2):\n    'Doc of f.'\n    return x"))
	for _, c := range []struct{ code, want string }{
		{"%quickref", "Quick Reference"},
		{"len?", "Return the number of items"},
		{"%pdoc f", "Doc of f."},
		{"f??", "return x"},
		{"%prun sum(range(10))", "function calls"},
		// ipykernel's own magics are listed and %less pages a file.
		{"%quickref", "%connect_info"},
		{"with open('n.txt', 'w') as f:\n    f.write('first\\nsecond\\n')\n%less n.txt", "first\nsecond"},
	} {
		r := k.exec(c.code)
		requireOK(t, r)
		// %prun prints one space itself, in Jupyter too.
		if strings.TrimSpace(r.Stdout) != "" || r.Value != nil {
			t.Errorf("%s: stdout %q, value %#v; pager text belongs in its own item", c.code, r.Stdout, r.Value)
		}
		if len(r.Display) != 1 || !r.Display[0].Pager || r.Display[0].MIME != "text/plain" ||
			!strings.Contains(r.Display[0].Data, c.want) {
			t.Errorf("%s: display %+v, want one text/plain pager item with %q", c.code, r.Display, c.want)
		}
	}
	r := k.exec("%autosave 60")
	requireOK(t, r)
	if r.Stdout != "Autosaving every 60 seconds\n" {
		t.Errorf("%%autosave stdout %q", r.Stdout)
	}
	// An ordinary display() is not pager text.
	r = k.exec("display('x')")
	if len(r.Display) != 1 || r.Display[0].Pager {
		t.Errorf("display('x') = %+v", r.Display)
	}
}

func TestNotebookFidelityNoStdin(t *testing.T) {
	requireModule(t, "IPython")
	k := startKernel(t)
	const noStdin = "IPython.core.error.StdinNotImplementedError"
	e := requireError(t, k.exec("input('name? ')"), noStdin)
	if !strings.Contains(e.Message, "raw_input was called") {
		t.Errorf("input() message %q", e.Message)
	}
	e = requireError(t, k.exec("import getpass\ngetpass.getpass()"), noStdin)
	if !strings.Contains(e.Message, "getpass was called") {
		t.Errorf("getpass() message %q", e.Message)
	}
	// %debug opens the last error, prints where it stopped, and cannot
	// read a command.
	requireError(t, k.exec("1 / 0"), "ZeroDivisionError")
	r := k.exec("%debug")
	requireError(t, r, noStdin)
	if !strings.Contains(r.Stdout, "----> 1 1 / 0") {
		t.Errorf("%%debug stdout %q", r.Stdout)
	}
	// pdb is IPython's, as ipykernel patches it: the stop shows its context.
	r = k.exec("import pdb\ndef g():\n    pdb.set_trace()\n    return 1\ng()")
	requireError(t, r, noStdin)
	if !strings.Contains(r.Stdout, "----> 4     return 1") {
		t.Errorf("pdb.set_trace() stdout %q", r.Stdout)
	}
	// As under ipykernel, whose debugpy hook returns when no debugger is
	// attached: breakpoint() does nothing.
	r = k.exec("breakpoint()\n'after'")
	requireOK(t, r)
	if plain(r) != "'after'" || r.Stdout != "" {
		t.Errorf("breakpoint(): value %q stdout %q", plain(r), r.Stdout)
	}
}

func TestNotebookFidelityNoStdinWithoutIPython(t *testing.T) {
	requirePython(t)
	k := startKernel(t)
	// Whatever the rootfs holds, input() never waits on fd 0.
	r := k.exec("input()")
	if r.Status != "error" || r.Error == nil || !strings.HasSuffix(r.Error.Type, "StdinNotImplementedError") && r.Error.Type != "jailcell_kernel.jupyter._NoStdin" {
		t.Fatalf("input(): %+v", r.Error)
	}
}
