package main

import (
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// criuBinary is where `make criu` installs criu (isolate.CriuBinary).
const criuBinary = "/var/lib/jailcell/criu/bin/criu"

// hibernateState is session/hibernate_test.go's: the stack imported, a 1M
// float64 array, a 1000-row DataFrame, an object and an open file.
const hibernateState = `import numpy as np, pandas as pd, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
a = np.arange(1_000_000, dtype=np.float64)
df = pd.DataFrame({"x": range(1000), "y": [i * i for i in range(1000)]})
class Thing:
    def __init__(self): self.tag = "kept"
thing = Thing()
f = open("notes.txt", "w")
f.write("before ")
f.flush()
`

const (
	hibernateCheck     = "f.write(\"after\")\nf.close()\nprint(a.sum(), int(df.y.sum()), thing.tag, open(\"notes.txt\").read())\n"
	hibernateCheckWant = "499999500000.0 332833500 kept before after"
)

// hib holds why the hibernation figures are missing or failed; the raw
// figures go to res.Raw like every other section's.
var hib struct {
	skipped string // the section did not run: no criu, or the first hibernate failed
	failed  string // restores ran but lost the kernel's state
}

// benchHibernate: one loaded session through `jailcell json`, hibernated
// and restored (the explicit restore op) round after round: each op's
// round trip, and the image directory's size on disk after each hibernate.
func benchHibernate(dir string) {
	log.Print("hibernation")
	if _, err := os.Stat(criuBinary); err != nil {
		hib.skipped = "criu not installed at " + criuBinary + " (make criu)"
		log.Printf("hibernation skipped: %s", hib.skipped)
		return
	}
	j := startJSONL(dir, "h", stack)
	defer j.stop()
	out, _ := j.call(map[string]any{"op": "create"})
	id := out["session"].(string)
	defer j.try(map[string]any{"op": "close", "session": id})
	if out, _ := j.call(map[string]any{"op": "exec", "session": id, "code": hibernateState}); status(out) != "ok" {
		fatal("hibernation state cell: %v", out)
	}
	// cmd/jailcell gives session.Config the state dir itself: a session's
	// directory is <state>/sessions/<id>.
	images := filepath.Join(j.state, "sessions", id, "images")
	// Beside the images, a hibernate saves a copy of the workspace disk
	// (it outlives a reboot): reported on its own, not as image.
	saved := filepath.Join(j.state, "sessions", id, "upper-saved")
	var dumps, restores []time.Duration
	var sizes, savedSizes []float64
	lost := 0
	for i := 0; i < n(10, 3); i++ {
		out, d, err := j.try(map[string]any{"op": "hibernate", "session": id})
		if err == nil && out["state"] != "hibernated" {
			err = fmt.Errorf("state %v after hibernate, want hibernated", out["state"])
		}
		if err != nil {
			// criu present but unusable here (`criu check`), or a
			// checkpoint that failed: say so, never fail the bench.
			if i == 0 {
				hib.skipped = fmt.Sprintf("hibernate: %v", err)
				log.Printf("hibernation skipped: %s", hib.skipped)
				return
			}
			hib.failed = fmt.Sprintf("hibernate round %d: %v", i+1, err)
			break
		}
		dumps = append(dumps, d)
		size, err := dirSize(images)
		if err != nil {
			fatal("image size: %v", err)
		}
		sizes = append(sizes, float64(size))
		if size, err := dirSize(saved); err == nil {
			savedSizes = append(savedSizes, float64(size))
		}
		out, d, err = j.try(map[string]any{"op": "restore", "session": id})
		if err != nil {
			hib.failed = fmt.Sprintf("restore round %d: %v", i+1, err)
			break
		}
		restores = append(restores, d)
		if out["state"] != "ready" {
			lost++
		}
	}
	res.Raw["hibernate_rounds"] = float64(len(dumps))
	res.Raw["hibernate_lost_rounds"] = float64(lost)
	res.Raw["hibernate_checkpoint_p50_ms"] = pct(dumps, 0.5)
	res.Raw["hibernate_checkpoint_p90_ms"] = pct(dumps, 0.9)
	res.Raw["hibernate_image_mib"] = median(sizes) / (1 << 20)
	res.Raw["hibernate_image_max_mib"] = maxOf(sizes) / (1 << 20)
	if len(savedSizes) > 0 {
		res.Raw["hibernate_saved_workspace_mib"] = median(savedSizes) / (1 << 20)
	}
	if len(restores) > 0 {
		res.Raw["hibernate_restore_p50_ms"] = pct(restores, 0.5)
		res.Raw["hibernate_restore_p90_ms"] = pct(restores, 0.9)
	}
	if hib.failed != "" {
		log.Printf("hibernation: %s", hib.failed)
		return
	}
	// A restore that answered "lost" started a fresh kernel: its time is
	// not a restore's, and the check below cannot pass.
	out, _, err := j.try(map[string]any{"op": "exec", "session": id, "code": hibernateCheck})
	var got any
	if r, ok := out["result"].(map[string]any); ok {
		got = r["stdout"]
	}
	switch {
	case err != nil:
		hib.failed = fmt.Sprintf("cell after the last restore: %v", err)
	case lost > 0:
		hib.failed = fmt.Sprintf("%d of %d restores lost the kernel (state \"lost\")", lost, len(restores))
	case got == nil || strings.TrimSpace(got.(string)) != hibernateCheckWant:
		hib.failed = fmt.Sprintf("cell after the last restore printed %q, want %q", got, hibernateCheckWant)
	}
	if hib.failed != "" {
		log.Printf("hibernation: %s", hib.failed)
	}
}

// dirSize is the bytes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var size int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			size += fi.Size()
		}
		return nil
	})
	return size, err
}

func maxOf(v []float64) float64 {
	m := math.NaN()
	for _, x := range v {
		if math.IsNaN(m) || x > m {
			m = x
		}
	}
	return m
}
