package session

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jailcell/jailcell/internal/testenv"
	"github.com/jailcell/jailcell/policy"
)

// profileSmoke is, per Debian package a rootfs profile may ask for, a cell
// that imports it and makes one real call, and what that cell must print.
// Every package of a profile must have an entry (the test fails otherwise),
// so adding a package to runtime/build-rootfs.sh means saying here how to
// prove it works in a sandbox.
var profileSmoke = map[string]struct{ code, want string }{
	"python3": {`import sys; print(sys.version_info[:2])`, "(3, 11)"},
	"python3-numpy": {`import numpy as np
print(np.linalg.solve(np.array([[2., 0], [0, 4]]), np.array([2., 8])).sum())`, "3.0"},
	"python3-pandas": {`import pandas as pd
print(pd.DataFrame({"a": [1, 2, 3]}).a.sum())`, "6"},
	"python3-matplotlib": {`import io, matplotlib.pyplot as plt
f = plt.figure(); plt.plot([1, 2]); b = io.BytesIO(); f.savefig(b, format="png"); plt.close(f)
print(b.getvalue()[:4] == b"\x89PNG")`, "True"},
	"python3-openpyxl": {`import io, openpyxl
wb = openpyxl.Workbook(); wb.active["A1"] = 42; b = io.BytesIO(); wb.save(b); b.seek(0)
print(openpyxl.load_workbook(b).active["A1"].value)`, "42"},
	"python3-pip":     {`import pip; print(pip.__version__.split(".")[0].isdigit())`, "True"},
	"python3-ipython": {`from IPython.lib.pretty import pretty; print(pretty(int))`, "int"},
	"python3-numexpr": {`import numexpr, numpy as np, pandas as pd
a = np.arange(10.)
print(numexpr.evaluate("2*a+1").sum(), pd.eval("a + 1", engine="numexpr").sum())`, "100.0 55.0"},
	"python3-scipy": {`from scipy import stats, optimize
print(stats.ttest_ind([1, 2, 3], [4, 5, 6]).pvalue < 0.05, round(optimize.minimize_scalar(lambda x: (x - 2) ** 2).x, 3))`, "True 2.0"},
	"python3-seaborn": {`import io, pandas as pd, seaborn as sns, matplotlib.pyplot as plt
ax = sns.barplot(data=pd.DataFrame({"x": ["a", "b"], "y": [1, 2]}), x="x", y="y")
b = io.BytesIO(); ax.figure.savefig(b, format="png"); plt.close(ax.figure)
print(b.getvalue()[:4] == b"\x89PNG")`, "True"},
	// KMeans runs on OpenMP threads, the forest on joblib's threads.
	"python3-sklearn": {`from sklearn.linear_model import LogisticRegression
from sklearn.cluster import KMeans
from sklearn.ensemble import RandomForestClassifier
X = [[0], [1], [2], [3]]; y = [0, 0, 1, 1]
print(list(LogisticRegression().fit(X, y).predict([[0], [3]])),
      len(set(KMeans(n_clusters=2, n_init=1, random_state=0).fit(X).labels_)),
      list(RandomForestClassifier(n_estimators=4, n_jobs=2, random_state=0).fit(X, y).predict([[0], [3]])))`, "[0, 1] 2 [0, 1]"},
	"python3-statsmodels": {`import numpy as np, statsmodels.api as sm
x = np.arange(10.); r = sm.OLS(2 * x + 1, sm.add_constant(x)).fit()
print([round(v, 6) for v in r.params])`, "[1.0, 2.0]"},
	"python3-sympy": {`import sympy as sp
x = sp.symbols("x"); print(sp.solve(x**2 - 4, x))`, "[-2, 2]"},
	"python3-networkx": {`import networkx as nx
print(nx.shortest_path_length(nx.path_graph(4), 0, 3))`, "3"},
	"python3-bs4": {`from bs4 import BeautifulSoup
print(BeautifulSoup("<p><b>hi</b></p>", "html.parser").b.text, BeautifulSoup("<p><b>ho</b></p>", "lxml").b.text)`, "hi ho"},
	"python3-lxml": {`from lxml import etree
print(etree.fromstring("<a><b>x</b></a>").findtext("b"))`, "x"},
	"python3-html5lib": {`import html5lib
print(html5lib.parse("<p>hi", namespaceHTMLElements=False).find(".//p").text)`, "hi"},
	"python3-yaml": {`import yaml; print(yaml.safe_load("a: [1, 2]"))`, "{'a': [1, 2]}"},
	"python3-tabulate": {`import pandas as pd
print(pd.DataFrame({"a": [1]}).to_markdown(index=False).splitlines()[-1])`, "|   1 |"},
	"python3-jinja2": {`import pandas as pd
print("<table" in pd.DataFrame({"a": [1]}).style.to_html())`, "True"},
	"python3-xlrd": {`import xlrd; print(xlrd.__VERSION__.split(".")[0])`, "1"},
	"python3-xlsxwriter": {`import io, pandas as pd
b = io.BytesIO(); pd.DataFrame({"a": [7]}).to_excel(b, engine="xlsxwriter", index=False); b.seek(0)
print(pd.read_excel(b, engine="openpyxl").a[0])`, "7"},
	"python3-odf": {`import io, pandas as pd
b = io.BytesIO(); pd.DataFrame({"a": [8]}).to_excel(b, engine="odf", index=False); b.seek(0)
print(pd.read_excel(b, engine="odf").a[0])`, "8"},
	"python3-docx": {`import io, docx
d = docx.Document(); d.add_paragraph("hi"); b = io.BytesIO(); d.save(b); b.seek(0)
print(docx.Document(b).paragraphs[0].text)`, "hi"},
	"python3-reportlab": {`import io
from reportlab.pdfgen import canvas
b = io.BytesIO(); c = canvas.Canvas(b); c.drawString(100, 100, "hi"); c.save()
print(b.getvalue()[:5])`, "b'%PDF-'"},
	"python3-pypdf": {`import io, pypdf
w = pypdf.PdfWriter(); w.add_blank_page(72, 72); b = io.BytesIO(); w.write(b); b.seek(0)
print(len(pypdf.PdfReader(b).pages))`, "1"},
	// No traffic: a request is only prepared.
	"python3-requests": {`import requests
print(requests.Request("GET", "http://example.invalid/", params={"a": 1}).prepare().url)`, "http://example.invalid/?a=1"},
	"python3-tqdm": {`import io
from tqdm import tqdm
print(sum(tqdm(range(5), file=io.StringIO())))`, "10"},
}

// TestProfileImportsInSandbox imports every package the rootfs's profile
// asks for, with one real call each, in one session under the default
// policy's limits (memory, pids, one CPU, seccomp): what a cell gets.
// Each package is its own cell, so a failure names it; the imports pile up
// in one kernel, as in an agent's notebook.
func TestProfileImportsInSandbox(t *testing.T) {
	r := testenv.Rootfs(t)
	asked := r.Manifest.ProfilePackages
	if len(asked) == 0 {
		asked = []string{"python3", "python3-numpy", "python3-pandas", "python3-matplotlib",
			"python3-openpyxl", "python3-pip", "python3-ipython"}
	}
	for _, name := range asked {
		if _, ok := profileSmoke[name]; !ok {
			t.Fatalf("profile %q asks for %s, which has no smoke cell in profileSmoke", r.Manifest.Profile, name)
		}
	}
	e := newEnv(t, func(c *Config) {
		p := policy.Default()
		two := p
		two.Name, two.CPUs = "two-cpus", 2
		c.Policies = map[string]policy.Policy{"default": p, "two-cpus": two}
	})
	id := e.create(t, CreateOptions{})
	for _, name := range asked {
		smoke := profileSmoke[name]
		start := time.Now()
		// Generous: a cold import of scipy plus sklearn takes seconds on
		// a loaded two-core machine.
		res := e.exec(t, id, smoke.code, 5*time.Minute)
		if res.Status != StatusOK || strings.TrimSpace(res.Stdout) != smoke.want {
			t.Errorf("%s: status %s, stdout %q, want %q; stderr %q, error %+v, limits %v",
				name, res.Status, res.Stdout, smoke.want, res.Stderr, res.Error, res.Limits)
			if res.State != StateKept {
				id = e.create(t, CreateOptions{})
			}
			continue
		}
		t.Logf("%-20s ok in %v", name, time.Since(start).Round(time.Millisecond))
	}
	if slices.Contains(asked, "python3-sklearn") {
		// The libraries' own view of their pools (threadpoolctl comes
		// with scikit-learn), not only the environment.
		res := e.exec(t, id, `from threadpoolctl import threadpool_info
print(sorted({(i["internal_api"], i["num_threads"]) for i in threadpool_info()}))`, time.Minute)
		if want := "[('openblas', 1), ('openmp', 1)]"; res.Status != StatusOK || strings.TrimSpace(res.Stdout) != want {
			t.Errorf("thread pools under the default policy's 1 CPU: status %s, stdout %q, want %q; stderr %q", res.Status, res.Stdout, want, res.Stderr)
		}
	}
	res := e.exec(t, id, `import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)`, 0)
	t.Logf("kernel peak RSS after the whole profile: %s MiB", strings.TrimSpace(res.Stdout))

	if !slices.Contains(asked, "python3-sklearn") {
		return
	}
	// Two CPUs: two threads per pool, OpenBLAS's worker threads (whose
	// mbind hint the seccomp filter refuses) still compute, and joblib's
	// process pool (n_jobs=2: fork, POSIX semaphores in /dev/shm) runs
	// without falling back to one job (it would warn on stderr).
	id = e.create(t, CreateOptions{Policy: "two-cpus"})
	res = e.exec(t, id, `import os, numpy as np, warnings
warnings.simplefilter("always")
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
a = np.ones((400, 400)); s = (a @ a).sum()
X = np.r_[np.zeros((50, 2)), np.ones((50, 2))]; y = [0] * 50 + [1] * 50
k = len(set(KMeans(n_clusters=2, n_init=2, random_state=0).fit(X).labels_))
cv = cross_val_score(LogisticRegression(), X, y, cv=2, n_jobs=2).tolist()
from threadpoolctl import threadpool_info
print(s == 400 ** 3, k, cv, sorted({(i["internal_api"], i["num_threads"]) for i in threadpool_info()}))`, 5*time.Minute)
	if want := "True 2 [1.0, 1.0] [('openblas', 2), ('openmp', 2)]"; res.Stderr != "" || res.Status != StatusOK || strings.TrimSpace(res.Stdout) != want {
		t.Errorf("two CPUs: status %s, stdout %q, want %q; stderr %q, error %+v", res.Status, res.Stdout, want, res.Stderr, res.Error)
	}
}

// TestKernelEnvThreadsFollowCPUs: the native thread pools follow the
// policy's CPU bandwidth, rounded up, never below one.
func TestKernelEnvThreadsFollowCPUs(t *testing.T) {
	for _, tt := range []struct {
		cpus float64
		want string
	}{{0.05, "1"}, {0.5, "1"}, {1, "1"}, {1.5, "2"}, {2, "2"}, {16, "16"}} {
		p := policy.Default()
		p.CPUs = tt.cpus
		env := kernelEnv(p)
		for _, v := range threadEnvVars {
			if !slices.Contains(env, v+"="+tt.want) {
				t.Errorf("cpus %g: env lacks %s=%s: %v", tt.cpus, v, tt.want, env)
			}
		}
		if len(env) != len(sandboxEnv)+len(threadEnvVars) {
			t.Errorf("cpus %g: env %v, want sandboxEnv plus %v", tt.cpus, env, threadEnvVars)
		}
	}
}
