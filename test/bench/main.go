package main

import (
	"encoding/json"
	"flag"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	binFlag      = flag.String("bin", "bin/jailcell", "jailcell binary")
	outFlag      = flag.String("out", "test/bench/out", "output directory")
	rootfsFlag   = flag.String("rootfs", "/var/lib/jailcell/rootfs", "jailcell rootfs base directory")
	quick        = flag.Bool("quick", false, "fewer samples (a smoke run)")
	pyClientFlag = flag.String("pyclient", "client/python", "the repo's Python client (the directory holding the jailcell package)")
	only         = flag.String("sections", "", "comma-separated sections to run, of "+strings.Join(sectionNames, ", ")+
		" (default all; a partial run prints and writes only their rows, and draws no chart)")
)

// sections in the order they run.
var sections = []struct {
	name string
	run  func(dir string)
}{
	{"jsonl", benchJSONL},
	{"pool", benchPool},
	{"socket", benchSocket},
	{"cold", benchCold},
	{"hibernation", benchHibernate},
	{"defaults", benchDefaults},
	{"e2b", benchE2B},
	{"restart", benchRestart},
	{"zygote", benchZygote},
	{"idle", benchIdle},
	{"peers", benchPeers},
}

var sectionNames = func() []string {
	var ns []string
	for _, s := range sections {
		ns = append(ns, s.name)
	}
	return ns
}()

// ran says whether section name runs in this invocation.
var ran = map[string]bool{}

// stack is the default preload: what an agent's data cells import.
var stack = []string{"numpy", "pandas", "matplotlib.pyplot"}

// live are the jailcell servers running now; fatal stops them so that no
// sandbox outlives the bench.
var (
	liveMu sync.Mutex
	live   = map[*server]bool{}
	tmpDir string // removed by fatal too
)

func fatal(format string, args ...any) {
	log.Printf(format, args...)
	liveMu.Lock()
	var ss []*server
	for s := range live {
		ss = append(ss, s)
	}
	liveMu.Unlock()
	for _, s := range ss {
		s.stop()
	}
	if tmpDir != "" {
		_ = os.RemoveAll(tmpDir)
	}
	finite := map[string]float64{}
	for k, v := range res.Raw {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			finite[k] = v // json.Marshal refuses NaN, and would print nothing
		}
	}
	b, _ := json.Marshal(finite)
	log.Printf("measured so far: %s", b)
	os.Exit(1)
}

// child makes a jailcell child process end with the bench: SIGTERM makes
// it tear its sandboxes down.
func child(cmd *exec.Cmd) {
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime)
	for _, s := range sections {
		ran[s.name] = *only == ""
	}
	if *only != "" {
		for _, name := range strings.Split(*only, ",") {
			if _, ok := ran[name]; !ok {
				log.Fatalf("-sections: unknown section %q; the sections are %s", name, strings.Join(sectionNames, ", "))
			}
			ran[name] = true
		}
	}
	if os.Geteuid() != 0 {
		fatal("bench needs root (it builds sandboxes)")
	}
	bin, err := filepath.Abs(*binFlag)
	if err != nil {
		fatal("%v", err)
	}
	*binFlag = bin
	if err := os.MkdirAll(*outFlag, 0o755); err != nil {
		fatal("%v", err)
	}
	// Short: a kernel's socket lives deep below each state dir, and a
	// Unix socket path has at most 107 bytes.
	tmp, err := os.MkdirTemp("", "jcb")
	if err != nil {
		fatal("%v", err)
	}
	tmpDir = tmp
	defer os.RemoveAll(tmp)
	// The sandboxes' mapped root must be able to pass through to the
	// state directories below.
	if err := os.Chmod(tmp, 0o711); err != nil {
		fatal("%v", err)
	}
	res.Started = time.Now().UTC()
	res.Host, _ = os.Hostname()
	t0 := time.Now()

	for _, s := range sections {
		if ran[s.name] {
			s.run(tmp)
		}
	}

	res.Seconds = time.Since(t0).Seconds()
	buildRows()
	printTable(os.Stdout)
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		fatal("encode results: %v", err)
	}
	if err := os.WriteFile(filepath.Join(*outFlag, "results.json"), b, 0o644); err != nil {
		fatal("%v", err)
	}
	if *only != "" {
		log.Printf("wrote %s/results.json (sections %s) in %.0f s", *outFlag, *only, res.Seconds)
		return
	}
	if err := chart(tmp); err != nil {
		log.Printf("chart: %v", err)
	}
	log.Printf("wrote %s/results.json and %s/bench.png in %.0f s", *outFlag, *outFlag, res.Seconds)
}
