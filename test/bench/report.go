package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Row is one line of the table.
type Row struct {
	Figure   string  `json:"figure"`
	Unit     string  `json:"unit"`
	Jailcell float64 `json:"jailcell"`
	Target   string  `json:"target,omitempty"`
	Met      *bool   `json:"met,omitempty"`
	Peer     string  `json:"peer,omitempty"`
	PeerVal  float64 `json:"peer_value,omitempty"`
	// Ratio is peer / jailcell for times (>1: jailcell is faster);
	// Compares says what it sets against what.
	Ratio    float64 `json:"ratio,omitempty"`
	Compares string  `json:"compares,omitempty"`
	Note     string  `json:"note,omitempty"`
	// Start says which start path the row's creates took, as their create
	// responses named it ("start: zygote 0, template 20, import 0").
	Start string `json:"start,omitempty"`
	// Close says, for a missed target, what would close it.
	Close string `json:"close,omitempty"`
	// Failed says why a figure could not be measured; its jailcell value
	// is then null, never a number.
	Failed string `json:"failed,omitempty"`
}

func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	v := struct {
		plain
		Jailcell *float64 `json:"jailcell"`
	}{plain: plain(r)}
	if r.Failed == "" {
		v.Jailcell = &r.Jailcell
	}
	return json.Marshal(v)
}

type results struct {
	Host    string             `json:"host"`
	Started time.Time          `json:"started"`
	Seconds float64            `json:"seconds"`
	Rows    []Row              `json:"rows"`
	Raw     map[string]float64 `json:"raw"`
}

var res = results{Raw: map[string]float64{}}

func buildRows() {
	r := res.Raw
	// add appends row; target is a number in row.Unit (0: none), le says
	// whether the figure must be at most (else at least) the target.
	add := func(section string, row Row, le bool, target float64) {
		if !ran[section] {
			return
		}
		if target > 0 && row.Failed == "" && !math.IsNaN(row.Jailcell) {
			met := row.Jailcell <= target
			if !le {
				met = row.Jailcell >= target
			}
			row.Met = &met
			if row.Target == "" {
				row.Target = fmt.Sprintf("%s %.3g", map[bool]string{true: "<=", false: ">="}[le], target)
			}
		}
		if row.PeerVal > 0 && row.Jailcell > 0 {
			row.Ratio = row.PeerVal / row.Jailcell
			if row.Unit == "cells/s" {
				row.Ratio = row.Jailcell / row.PeerVal
			}
		}
		res.Rows = append(res.Rows, row)
	}
	// both: a row whose peer ran in another section.
	both := func(a, b string) string {
		if ran[a] && ran[b] {
			return a
		}
		return "-"
	}
	const like = "like for like"
	const warm = "warm pool vs a cold start: not like for like"

	// The defaults section's targets, each with the configuration a fresh install has.
	d := both("defaults", "peers")
	add(d, Row{Figure: "create + first cell `1`, sequential, 0.3 s apart, defaults, p50", Unit: "ms", Jailcell: r["defaults_create_first_cell_p50_ms"],
		Target: fmt.Sprintf("<= Jupyter start / 50 = %.3g", r["jupyter_start_ms"]/50), Peer: "Jupyter kernel start", PeerVal: r["jupyter_start_ms"],
		Compares: "Jupyter kernel start / jailcell create + cell, each as a fresh install runs it"}, true, r["jupyter_start_ms"]/50)
	note := fmt.Sprintf("%.0f kernels restored from the template, %.0f imported", r["defaults_template_starts"], r["defaults_import_starts"])
	if f := r["defaults_burst20_ms_failed"]; f > 0 {
		note += fmt.Sprintf("; %.0f failed", f)
	}
	add(d, Row{Figure: "20 creates at once, each until it answered 1+1, defaults", Unit: "ms", Jailcell: r["defaults_burst20_ms"],
		Target: fmt.Sprintf("<= peer / 3 = %.0f", r["runc_burst20_stack_ms"]/3), Peer: "20 runc run at once importing numpy+pandas+pyplot, same rootfs", PeerVal: r["runc_burst20_stack_ms"],
		Compares: like + ": both start 20 sandboxes with the stack imported and run a line", Note: note}, true, r["runc_burst20_stack_ms"]/3)
	add(both("cold", "peers"), Row{Figure: "create to ready, cold, no preload, p50", Unit: "ms", Jailcell: r["cold_bare_create_p50_ms"], Target: fmt.Sprintf("<= runc = %.3g", r["runc_pass_ms"]),
		Peer: "runc run python3 -c pass", PeerVal: r["runc_pass_ms"], Compares: like + ": a sandbox with a bare interpreter"}, true, r["runc_pass_ms"])
	add("jsonl", Row{Figure: "cell round trip x += 1, JSON-lines, Go client, p50", Unit: "ms", Jailcell: r["jsonl_rt_p50_ms"], Peer: "Jupyter execute p50 (Python client)", PeerVal: r["jupyter_rt_p50_ms"],
		Compares: "Jupyter from Python / jailcell from Go"}, true, 0.25)
	add(both("defaults", "peers"), Row{Figure: "cell round trip x += 1, JSON-lines, Python client, defaults, p50", Unit: "ms", Jailcell: r["defaults_py_jsonl_rt_p50_ms"],
		Target: fmt.Sprintf("<= Jupyter / 10 = %.3g", r["jupyter_rt_p50_ms"]/10), Peer: "Jupyter execute p50 (Python client)", PeerVal: r["jupyter_rt_p50_ms"],
		Compares: like + ": both from a Python client"}, true, r["jupyter_rt_p50_ms"]/10)
	add("defaults", Row{Figure: "memory per idle preloaded session (cgroup charge), defaults", Unit: "MB", Jailcell: r["idle_session_cgroup_mb_defaults"],
		Note: fmt.Sprintf("MB = 10^6 bytes; anonymous part %.1f MB, the rest is rootfs page cache shared on the host", r["idle_session_anon_mb_defaults"])}, true, 50)

	// The E2B door, each figure from E2B's stock SDK in node, with a fresh
	// install's defaults.
	add("e2b", Row{Figure: "runCode x += 1 round trip, stock E2B SDK through the E2B door, p50", Unit: "ms", Jailcell: r["e2b_sdk_rt_p50_ms"],
		Target: fmt.Sprintf("<= own API x 1.5 = %.3g", r["e2b_own_rt_p50_ms"]*1.5), Peer: "the same cell over jailcell's own HTTP API, same node client, TCP", PeerVal: r["e2b_own_rt_p50_ms"],
		Compares: "jailcell's own API / the E2B door, both over loopback TCP from node"}, true, r["e2b_own_rt_p50_ms"]*1.5)
	hosted := "hosted, as ComputeSDK measures (not run here): Daytona 110 ms median, E2B 440 ms"
	for _, f := range []struct{ key, figure string }{
		{"tti_seq", "time to interactive (create, then `true` answered), stock E2B SDK, sequential"},
		{"tti_burst", "time to interactive (create, then `true` answered), stock E2B SDK, 20 at once"},
	} {
		add("e2b", Row{Figure: f.figure + ", p50", Unit: "ms", Jailcell: r["e2b_"+f.key+"_p50_ms"], Note: hosted}, true, 50)
		add("e2b", Row{Figure: f.figure + ", p99", Unit: "ms", Jailcell: r["e2b_"+f.key+"_p99_ms"]}, true, 150)
	}

	// The rest of the picture.
	add("jsonl", Row{Figure: "cell round trip x += 1, JSON-lines, Go client, p99", Unit: "ms", Jailcell: r["jsonl_rt_p99_ms"], Peer: "Jupyter execute p99 (Python client)", PeerVal: r["jupyter_rt_p99_ms"],
		Compares: "Jupyter from Python / jailcell from Go"}, true, 2)
	add("socket", Row{Figure: "cell round trip x += 1, Unix socket, Go client, p50", Unit: "ms", Jailcell: r["socket_rt_p50_ms"], Peer: "Jupyter execute p50 (Python client)", PeerVal: r["jupyter_rt_p50_ms"],
		Compares: "Jupyter from Python / jailcell from Go"}, true, 0.5)
	add("socket", Row{Figure: "cell round trip x += 1, Unix socket, Go client, p99", Unit: "ms", Jailcell: r["socket_rt_p99_ms"], Peer: "Jupyter execute p99 (Python client)", PeerVal: r["jupyter_rt_p99_ms"],
		Compares: "Jupyter from Python / jailcell from Go"}, true, 0)
	add("pool", Row{Figure: "create to ready, from a full pool of 20, p50", Unit: "ms", Jailcell: r["pool_create_p50_ms"], Peer: "Jupyter kernel start", PeerVal: r["jupyter_start_ms"], Compares: warm}, true, 5)
	add("cold", Row{Figure: "create to ready, cold, numpy+pandas+pyplot preloaded, template on, p50", Unit: "ms", Jailcell: r["cold_stack_create_p50_ms"], Peer: "Jupyter start + stack import", PeerVal: r["jupyter_start_ms"] + r["jupyter_import_ms"],
		Compares: like + ": a kernel with the stack imported"}, true, 0)
	add("pool", Row{Figure: "first pandas cell after a pooled create", Unit: "ms", Jailcell: r["first_pandas_cell_p50_ms"], Peer: "Jupyter import of the stack", PeerVal: r["jupyter_import_ms"],
		Compares: "the stack preloaded vs imported in the cell: not like for like"}, true, 20)
	note = ""
	if f := r["create100_cold_ms_failed"]; f > 0 {
		note = fmt.Sprintf("%.0f failed: kernel start timeout", f)
	}
	add("socket", Row{Figure: "100 concurrent creates, all ready (no pool, stack preloaded, template on)", Unit: "ms", Jailcell: r["create100_cold_ms"], Note: note}, true, 0)
	note = ""
	if f := r["pool20_all_ready_ms_failed"]; f > 0 {
		note = fmt.Sprintf("%.0f failed", f)
	}
	add("pool", Row{Figure: "20 concurrent creates, all ready (a full pool of 20)", Unit: "ms", Jailcell: r["pool20_all_ready_ms"], Note: note}, true, 300)
	add("socket", Row{Figure: "trivial cells per second, 16 sessions", Unit: "cells/s", Jailcell: r["cells_per_s_16"]}, false, 5000)
	add("socket", Row{Figure: "memory per idle preloaded session (cgroup charge), 100 sessions", Unit: "MB", Jailcell: r["idle_session_cgroup_mb_100"],
		Note: fmt.Sprintf("MB = 10^6 bytes; anonymous part %.1f MB", r["idle_session_anon_mb_100"])}, true, 0)
	add("socket", Row{Figure: "daemon RSS, 0 sessions", Unit: "MB", Jailcell: r["daemon_rss_0_mb"]}, true, 0)
	add("socket", Row{Figure: "daemon RSS, 100 sessions", Unit: "MB", Jailcell: r["daemon_rss_100_mb"]}, true, 150)
	c := both("cold", "peers")
	add(c, Row{Figure: "one-shot cell `pass`, fresh sandbox, no preload, p50", Unit: "ms", Jailcell: r["oneshot_pass_p50_ms"], Peer: "runc run python3 -c pass", PeerVal: r["runc_pass_ms"], Compares: like}, true, 0)
	add(c, Row{Figure: "  the same against bwrap", Unit: "ms", Jailcell: r["oneshot_pass_p50_ms"], Peer: "bwrap python3 -c pass", PeerVal: r["bwrap_pass_ms"], Compares: "bwrap has no cgroups or seccomp filter here"}, true, 0)
	add(c, Row{Figure: "  the same against a bare chroot (no isolation)", Unit: "ms", Jailcell: r["oneshot_pass_p50_ms"], Peer: "chroot python3 -c pass", PeerVal: r["chroot_pass_ms"], Compares: "no isolation at all"}, true, 0)
	if ran["hibernation"] {
		hibernationRows(add)
	}
	if ran["zygote"] {
		zygoteRows(add)
	}
	if ran["idle"] {
		idleRows(add)
	}
	restartRows(add)
}

// hibernationRows adds the hibernation section's rows. 80 MB, the image
// target, is 76.3 MiB.
func hibernationRows(add func(string, Row, bool, float64)) {
	const fig = "a loaded session (numpy+pandas+pyplot, 1M-float array, 1000-row DataFrame, open file)"
	if hib.skipped != "" {
		add("hibernation", Row{Figure: "hibernate and restore " + fig, Unit: "ms", Failed: "skipped: " + hib.skipped}, true, 0)
		return
	}
	r := res.Raw
	rounds := fmt.Sprintf("%.0f rounds", r["hibernate_rounds"])
	add("hibernation", Row{Figure: "hibernate (checkpoint) " + fig + ", p50", Unit: "ms", Jailcell: r["hibernate_checkpoint_p50_ms"], Note: rounds}, true, 0)
	add("hibernation", Row{Figure: "  hibernate, p90", Unit: "ms", Jailcell: r["hibernate_checkpoint_p90_ms"]}, true, 0)
	add("hibernation", Row{Figure: "restore op of the same session, kernel reconnected, p50", Unit: "ms", Jailcell: r["hibernate_restore_p50_ms"], Target: "<= 200", Failed: hib.failed}, true, 200)
	add("hibernation", Row{Figure: "  restore, p90", Unit: "ms", Jailcell: r["hibernate_restore_p90_ms"], Failed: hib.failed}, true, 0)
	add("hibernation", Row{Figure: "checkpoint image of that session, median", Unit: "MiB", Jailcell: r["hibernate_image_mib"], Target: "<= 76.3",
		Note: fmt.Sprintf("80 MB; largest %.1f MiB", r["hibernate_image_max_mib"])}, true, 80e6/(1<<20))
}

func printTable(w io.Writer) {
	fmt.Fprintf(w, "\n| figure | jailcell | target | met | peer | peer value | peer/jailcell |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range res.Rows {
		met := ""
		if r.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*r.Met]
		}
		peer, pv, ratio := r.Peer, "", ""
		if r.PeerVal > 0 {
			pv = fmtVal(r.PeerVal, r.Unit)
		}
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.1fx", r.Ratio)
			if r.Compares != "" {
				ratio += " (" + r.Compares + ")"
			}
		}
		target := r.Target
		if target != "" && !strings.HasSuffix(target, r.Unit) {
			target += " " + r.Unit
		}
		fig := r.Figure
		if r.Note != "" {
			fig += " (" + r.Note + ")"
		}
		if r.Start != "" {
			fig += " (" + r.Start + ")"
		}
		val := fmtVal(r.Jailcell, r.Unit)
		if r.Failed != "" {
			fig += " (" + r.Failed + ")"
			val = "**failed**"
			if strings.HasPrefix(r.Failed, "skipped") {
				val = "skipped"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", fig, val, target, met, peer, pv, ratio)
	}
	head := "\nMissed, and what would close it:\n"
	for _, r := range res.Rows {
		if r.Met != nil && !*r.Met && r.Close != "" {
			fmt.Fprintf(w, "%s- %s: %s\n", head, strings.TrimSpace(r.Figure), r.Close)
			head = ""
		}
	}
	fmt.Fprintf(w, "\n%.0f s in all.\n", res.Seconds)
}

func fmtVal(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case unit == "cells/s":
		return fmt.Sprintf("%.0f %s", v, unit)
	case v < 10:
		return fmt.Sprintf("%.3g %s", v, unit)
	default:
		return fmt.Sprintf("%.0f %s", v, unit)
	}
}

const chartScript = `
import json
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = [r for r in json.load(open("results.json"))["rows"] if r.get("unit") == "ms" and r.get("peer_value")]
labels = [r["figure"].strip() for r in rows]
fig, ax = plt.subplots(figsize=(11, 0.55 * len(rows) + 1.5))
y = range(len(rows))
ax.barh([i + 0.2 for i in y], [r["jailcell"] for r in rows], 0.4, label="jailcell", color="#2a7ab0")
ax.barh([i - 0.2 for i in y], [r["peer_value"] for r in rows], 0.4, label="peer", color="#c8553d")
for i, r in enumerate(rows):
    ax.text(r["peer_value"] * 1.1, i - 0.2, r["peer"], va="center", fontsize=7)
ax.set_yticks(list(y))
ax.set_yticklabels(labels, fontsize=8)
ax.invert_yaxis()
ax.set_xscale("log")
ax.set_xlabel("milliseconds (log scale; shorter is better)")
ax.set_title("jailcell vs peers on this machine")
ax.legend(loc="lower right")
fig.tight_layout()
fig.savefig("bench.png", dpi=110)
`

// chart draws bench.png with the rootfs's matplotlib, in a one-shot
// jailcell sandbox.
func chart(dir string) error {
	d := filepath.Join(dir, "c")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	script := filepath.Join(d, "chart.py")
	if err := os.WriteFile(script, []byte(chartScript), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(d, "config.yaml")
	writeConfig(cfg, nil, 0)
	out := filepath.Join(d, "out")
	cmd := exec.Command(*binFlag, "run", "--config", cfg, "--state-dir", filepath.Join(d, "state"), "--rootfs", *rootfsFlag,
		"--file", filepath.Join(*outFlag, "results.json"), "--out", out, script)
	child(cmd)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("jailcell run: %v: %s", err, b)
	}
	b, err := os.ReadFile(filepath.Join(out, "bench.png"))
	if err != nil {
		return errors.New("the chart cell wrote no bench.png")
	}
	return os.WriteFile(filepath.Join(*outFlag, "bench.png"), b, 0o644)
}
