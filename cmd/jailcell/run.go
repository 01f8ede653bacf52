package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/httpapi"
	"github.com/jailcell/jailcell/internal/confined"
	"github.com/jailcell/jailcell/session"
)

// Exit statuses of `jailcell run`, following timeout(1) and the shell.
const (
	exitCellOK      = 0
	exitCellError   = 1   // the cell raised an exception
	exitCellTimeout = 124 // the cell ran out of time
	exitRunFailed   = 125 // jailcell itself failed; the cell may not have run
	exitCellKilled  = 137 // the cell was OOM-killed or killed (128+SIGKILL)
)

const (
	// maxCodeBytes bounds the source read from FILE or stdin.
	maxCodeBytes = 16 << 20
	// maxInputBytes bounds the --file inputs together (they are held in
	// memory and the sandbox's disk is smaller anyway).
	maxInputBytes = 1 << 30
	defaultOutDir = "jailcell-out"
)

func newRunCmd() *cobra.Command {
	var (
		timeout time.Duration
		asJSON  bool
		inputs  []string
		outDir  string
		pol     string
	)
	cmd := &cobra.Command{
		Use:   "run FILE|-",
		Short: "Run a Python file (or stdin) once in a fresh sandbox",
		Long: `Run FILE (or stdin with "-") as one cell in a fresh sandbox that is destroyed
afterwards. Output streams to the terminal as it happens; the value of a
trailing expression is printed after it, as in a notebook; an exception's
traceback goes to stderr. Files the cell creates in its working directory are
written under --out (created only if there are any; never outside it, never
through a symlink), and so are the figures it displays (plt.show(),
display()): figure-1.png, figure-2.svg, ... in the order shown.

Exit status: 0 the cell finished, 1 it raised an exception, 124 it timed out,
137 it was OOM-killed or killed, 125 jailcell itself failed.

When the jailcell service answers on its socket (or --connect names one),
the cell runs there, as this user, with no root needed. Otherwise it runs
in a sandbox built by this process, which needs root.`,
		Example: `  jailcell run analysis.py --file sales.xlsx      # through the running service
  sudo jailcell run --embedded analysis.py      # no service: sandboxes in this process
  echo 'print(1+1)' | sudo jailcell run -
  sudo jailcell run --json plot.py > result.json`,
		Args: cobra.ExactArgs(1),
	}
	hf := addHostFlags(cmd)
	conn := addConnectFlags(cmd, hf)
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "wall-clock limit of the cell (0: the policy's default, 60s); clamped to the policy's ceiling")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole result object as JSON on stdout instead of streaming output")
	cmd.Flags().StringArrayVar(&inputs, "file", nil, "input file placed in the cell's working directory under its base name (repeatable)")
	cmd.Flags().StringVar(&outDir, "out", defaultOutDir, "directory the cell's new and changed files, and its figures, are written to")
	cmd.Flags().StringVar(&pol, "policy", "", "configured policy to run the cell under (default: the policy named default)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if timeout < 0 {
			return fmt.Errorf("--timeout %s: must be >= 0", timeout)
		}
		code, err := readCode(args[0])
		if err != nil {
			return err
		}
		files, err := readInputs(inputs)
		if err != nil {
			return err
		}
		log, err := hf.logger()
		if err != nil {
			return err
		}
		status, err := runOnce(hf, conn, log, pol, session.ExecRequest{Code: code, Timeout: timeout, Files: files}, asJSON, outDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "jailcell run:", err)
			return exitError{exitRunFailed}
		}
		if status != exitCellOK {
			return exitError{status}
		}
		return nil
	}
	return cmd
}

func runOnce(hf *hostFlags, conn *connectFlags, log *slog.Logger, policyName string, req session.ExecRequest, asJSON bool, outDir string) (int, error) {
	remote, err := hf.service(conn, log)
	if err != nil {
		return 0, err
	}
	var onOutput func(stream, text string)
	if !asJSON {
		// Chunks may come from the stdout and stderr readers at once.
		var mu sync.Mutex
		onOutput = func(stream, text string) {
			mu.Lock()
			defer mu.Unlock()
			if stream == "stderr" {
				io.WriteString(os.Stderr, text)
			} else {
				io.WriteString(os.Stdout, text)
			}
		}
	}
	var (
		res    *session.Result
		runErr error
	)
	// Registered before the host is built: a signal during the build
	// cancels the run once it starts, instead of ending us by the
	// default action with whatever the build set up left behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if remote != nil {
		res, runErr = runRemote(ctx, remote, policyName, req, onOutput)
		stop()
		remote.Close()
	} else {
		st, err := hf.build(log)
		if err != nil {
			stop()
			return 0, err
		}
		req.OnOutput = onOutput
		res, runErr = st.manager.RunOnce(ctx, os.Getuid(), policyName, req)
		stop()
		if err := st.shutdown(30 * time.Second); err != nil {
			log.Warn("shut down", "err", err)
		}
	}
	if runErr != nil {
		return 0, runErr
	}

	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return 0, fmt.Errorf("print result: %w", err)
		}
	} else {
		report(os.Stdout, os.Stderr, res)
	}
	if err := writeReturned(outDir, append(res.Files, figures(res)...), os.Stderr); err != nil {
		return 0, err
	}
	return exitStatus(res.Status), nil
}

func exitStatus(status string) int {
	switch status {
	case session.StatusOK:
		return exitCellOK
	case session.StatusTimeout:
		return exitCellTimeout
	case session.StatusOOM, session.StatusKilled:
		return exitCellKilled
	}
	return exitCellError
}

// report prints what streaming did not show: the value of a trailing
// expression, the traceback, and why a cell was stopped.
func report(stdout, stderr io.Writer, res *session.Result) {
	if v, ok := res.Value["text/plain"].(string); ok && v != "" {
		fmt.Fprintln(stdout, v)
	}
	if res.StdoutTruncated || res.StderrTruncated {
		fmt.Fprintln(stderr, "jailcell: output was truncated at the policy's output_bytes cap")
	}
	switch res.Status {
	case session.StatusError:
		if res.Error != nil {
			if tb := strings.TrimRight(res.Error.Traceback, "\n"); tb != "" {
				fmt.Fprintln(stderr, tb)
			} else {
				fmt.Fprintf(stderr, "%s: %s\n", res.Error.Type, res.Error.Message)
			}
		}
	case session.StatusTimeout:
		fmt.Fprintf(stderr, "jailcell: the cell timed out after %s\n", time.Duration(res.Usage.WallMS)*time.Millisecond)
	case session.StatusOOM:
		fmt.Fprintf(stderr, "jailcell: the cell ran out of memory (peak %s) and was killed\n", humanBytes(res.Usage.PeakMemoryBytes))
	case session.StatusKilled:
		fmt.Fprintln(stderr, "jailcell: the cell was killed")
	}
	if len(res.Limits) > 0 && res.Status != session.StatusOK {
		fmt.Fprintf(stderr, "jailcell: limits reached: %s\n", strings.Join(res.Limits, ", "))
	}
	if n := len(res.Display) - len(figures(res)); n > 0 {
		fmt.Fprintf(stderr, "jailcell: %d rich output(s) (HTML, text, JSON) not shown; use --json to get them\n", n)
	}
}

// figureExt names the display types written as figure files.
var figureExt = map[string]string{"image/png": ".png", "image/svg+xml": ".svg"}

// figures turns the cell's displayed images into files for --out:
// figure-N.png or .svg, N counting displayed images from 1, skipping a name
// the cell's own files already take. The names are chosen here, not by the
// sandbox; the content is the display item's, already within the result's
// budget (PNG as base64, SVG as text). An undecodable item is skipped.
func figures(res *session.Result) []session.FileChange {
	taken := map[string]bool{}
	for _, f := range res.Files {
		taken[f.Path] = true
	}
	var out []session.FileChange
	n := 0
	for _, d := range res.Display {
		ext, ok := figureExt[d.MIME]
		if !ok {
			continue
		}
		data := []byte(d.Data)
		if d.MIME == "image/png" {
			b, err := base64.StdEncoding.DecodeString(d.Data)
			if err != nil {
				continue
			}
			data = b
		}
		name := ""
		for name == "" || taken[name] {
			n++
			name = fmt.Sprintf("figure-%d%s", n, ext)
		}
		taken[name] = true
		out = append(out, session.FileChange{Path: name, Size: int64(len(data)), Change: "created", Data: data})
	}
	return out
}

func readCode(arg string) (string, error) {
	var r io.Reader
	name := arg
	if arg == "-" {
		r, name = os.Stdin, "stdin"
	} else {
		f, err := os.Open(arg)
		if err != nil {
			return "", fmt.Errorf("read code: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxCodeBytes+1))
	if err != nil {
		return "", fmt.Errorf("read code from %s: %w", name, err)
	}
	if len(b) > maxCodeBytes {
		return "", fmt.Errorf("read code from %s: over %d bytes", name, maxCodeBytes)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return "", fmt.Errorf("read code from %s: it is empty", name)
	}
	return string(b), nil
}

// readInputs reads --file arguments; each lands in the working directory
// under its base name.
func readInputs(paths []string) ([]session.File, error) {
	var files []session.File
	seen := map[string]string{}
	var total int64
	for _, p := range paths {
		name := filepath.Base(p)
		if prev, ok := seen[name]; ok {
			return nil, fmt.Errorf("--file %s and --file %s would both be %q in the cell's directory", prev, p, name)
		}
		seen[name] = p
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("--file: %w", err)
		}
		fi, err := f.Stat()
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a regular file", p)
		}
		var b []byte
		if err == nil {
			b, err = io.ReadAll(io.LimitReader(f, maxInputBytes-total+1))
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("--file: %w", err)
		}
		total += int64(len(b))
		if total > maxInputBytes {
			return nil, fmt.Errorf("--file: inputs are over %s together", humanBytes(maxInputBytes))
		}
		files = append(files, session.File{Path: name, Data: b})
	}
	return files, nil
}

// writeReturned writes a one-shot cell's files under dir. Their paths come
// from the sandbox, so they are untrusted: each must be a clean relative
// path and is written through confined.WriteFile, as the daemon writes
// into a workspace (one component at a time, no symlink followed, only
// directories on the way and a regular file at the end).
func writeReturned(dir string, files []session.FileChange, stderr io.Writer) error {
	var todo []session.FileChange
	for _, f := range files {
		switch {
		case f.Change == "deleted":
		case f.Omitted:
			// The manager omits a file over the cap or one it would not
			// read (a symlink, a special file) without saying which.
			fmt.Fprintf(stderr, "jailcell: %q (%s) not returned: over the policy's return_file_bytes cap, or not a regular file\n", f.Path, humanBytes(f.Size))
		default:
			todo = append(todo, f)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create output dir: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open output dir: %w", err)
	}
	defer root.Close()
	var failed int
	for _, f := range todo {
		if err := confined.WriteFile(root, f.Path, f.Data, -1, nil); err != nil {
			fmt.Fprintf(stderr, "jailcell: not writing %q: %v\n", f.Path, err)
			failed++
			continue
		}
		fmt.Fprintf(stderr, "jailcell: wrote %q (%s)\n", filepath.Join(dir, f.Path), humanBytes(int64(len(f.Data))))
	}
	if failed > 0 {
		return fmt.Errorf("%d returned file(s) could not be written under %s", failed, dir)
	}
	return nil
}

// runRemote runs the cell in the service, streaming its output to
// onOutput (nil: none).
func runRemote(ctx context.Context, r *httpapi.Remote, policyName string, er session.ExecRequest, onOutput func(stream, text string)) (*session.Result, error) {
	req := &api.Request{ID: json.RawMessage("1"), Op: api.OpExec, Code: er.Code, TimeoutS: er.Timeout.Seconds(),
		Files: er.Files, Policy: policyName, Stream: onOutput != nil}
	var emit func(api.Event)
	if onOutput != nil {
		emit = func(ev api.Event) { onOutput(ev.Event, ev.Text) }
	}
	resp := r.Handle(ctx, os.Getuid(), req, emit)
	switch {
	case resp.Error != nil:
		return nil, fmt.Errorf("%s: %s", resp.Error.Code, resp.Error.Message)
	case resp.Result == nil:
		return nil, fmt.Errorf("the service at %s answered without a result", r.Socket())
	}
	return resp.Result, nil
}
