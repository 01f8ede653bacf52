package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/jupyter"
)

// newKernelCmd is `jailcell kernel -f CONNECTION_FILE`: a Jupyter kernel
// whose cells run in a jailcell session, started by Jupyter from the
// kernelspec that `jailcell kernelspec install` writes.
func newKernelCmd() *cobra.Command {
	var connFile, policyName string
	var timeout, ttl float64
	cmd := &cobra.Command{
		Use:   "kernel -f CONNECTION_FILE",
		Short: "Run as a Jupyter kernel whose cells run in a jailcell session",
		Long: `Speak Jupyter's messaging protocol (5.3, ZMQ, HMAC-signed) on the ports of
CONNECTION_FILE, the file Jupyter writes for each kernel it starts, and run
every cell in one jailcell session, created at start and closed at
shutdown. Jupyter starts it through the kernelspec that
'jailcell kernelspec install' writes; there is no need to run it by hand.

When the jailcell service answers on its socket (or --connect names one),
the session is made there, as this user, with no root needed: the
service's allowed uids or groups decide.

Only this user reaches the kernel's ports: on TCP (loopback), connections
from sockets of other uids are refused; on ipc (the client's
KernelManager.transport = "ipc") the sockets must be in a directory of
this user's with mode 0700, as Jupyter's runtime directory is. An iopub
subscriber that falls 8 MiB behind, or takes nothing for 10 s, is dropped.`,
		Args: cobra.NoArgs,
	}
	hf := addHostFlags(cmd)
	conn := addConnectFlags(cmd, hf)
	cmd.Flags().StringVarP(&connFile, "connection-file", "f", "", "Jupyter's connection file (required)")
	cmd.Flags().StringVar(&policyName, "policy", "", "policy of the kernel's session (default: the default policy)")
	cmd.Flags().Float64Var(&timeout, "timeout", 0, "every cell's time limit in seconds (0: the policy's default; clamped to its ceiling)")
	cmd.Flags().Float64Var(&ttl, "ttl", 0, "the session's idle timeout in seconds (0: the service's sessions.idle_ttl; up to its sessions.max_idle_ttl)")
	_ = cmd.MarkFlagRequired("connection-file")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if timeout < 0 {
			return fmt.Errorf("--timeout %g: must be >= 0 seconds (0: the policy's default)", timeout)
		}
		if ttl < 0 {
			return fmt.Errorf("--ttl %g: must be >= 0 seconds (0: the service's default)", ttl)
		}
		c, err := jupyter.ReadConnection(connFile)
		if err != nil {
			return err
		}
		return hf.runFrontDoor(conn, func(ctx context.Context, h api.Handler, log *slog.Logger) error {
			// Jupyter interrupts with a message (the kernelspec says
			// interrupt_mode "message"); a SIGINT is the terminal's Ctrl-C
			// reaching the whole process group of a jupyter command, and
			// must not end the kernel under it.
			signal.Ignore(os.Interrupt)
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			if pid, err := strconv.Atoi(os.Getenv("JPY_PARENT_PID")); err == nil {
				go watchParent(ctx, cancel, pid, time.Second)
			}
			err := jupyter.Serve(ctx, h, c, jupyter.Options{Owner: os.Getuid(), Policy: policyName, TimeoutS: timeout, TTLS: ttl, Version: version, Logger: log})
			if errors.Is(err, errParentGone) {
				log.Warn("the Jupyter client that started this kernel is gone: its session is closed and the kernel ends", "err", err)
				return nil
			}
			return err
		})
	}
	return cmd
}

// errParentGone ends a kernel whose Jupyter client died without shutting
// it down.
var errParentGone = errors.New("the kernel's parent process ended")

// watchParent cancels ctx with errParentGone once the Jupyter client
// that started this kernel is gone, as ipykernel's parent poller does: a
// client that crashes, or is killed, never sends shutdown_request, and its
// kernel would otherwise live on for good, holding its session on the
// service and the client's output pipe (a caller waiting for that pipe to
// close waits forever). client is JPY_PARENT_PID, which jupyter_client
// sets; a kernel run by hand (no JPY_PARENT_PID) is not watched. As in
// ipykernel: while the parent is client, a change of parent ends the
// kernel; when it is not (a launcher in between), being reparented to
// init does; a parent of 0 or 1 is not watched.
func watchParent(ctx context.Context, cancel context.CancelCauseFunc, client int, every time.Duration) {
	if client <= 1 {
		return
	}
	parent := client
	if os.Getppid() != client {
		parent = 0
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := os.Getppid()
			if (parent == 0 && now == 1) || (parent != 0 && now != parent) {
				cancel(fmt.Errorf("%w (JPY_PARENT_PID %d; parent now %d)", errParentGone, client, now))
				return
			}
		}
	}
}

// kernelNameRE is what Jupyter accepts as a kernel name.
var kernelNameRE = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// systemKernelsDir is where `jupyter kernelspec install` puts a kernelspec
// without --user or --prefix on Linux: the first of jupyter_core's
// SYSTEM_JUPYTER_PATH.
const systemKernelsDir = "/usr/local/share/jupyter/kernels"

// kernelspec is Jupyter's kernel.json.
type kernelspec struct {
	Argv          []string       `json:"argv"`
	DisplayName   string         `json:"display_name"`
	Language      string         `json:"language"`
	InterruptMode string         `json:"interrupt_mode"`
	Metadata      map[string]any `json:"metadata"`
}

// newKernelspecCmd is `jailcell kernelspec install`.
func newKernelspecCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kernelspec",
		Short: "Manage the Jupyter kernelspec that runs cells in jailcell",
		Args:  cobra.NoArgs,
	}
	var user bool
	var prefix, name, display, socket, policyName string
	var timeout, ttl float64
	install := &cobra.Command{
		Use:   "install",
		Short: "Install a Jupyter kernelspec whose kernel is 'jailcell kernel'",
		Long: `Write KERNELS/NAME/kernel.json, a kernelspec whose argv runs this binary
(by its absolute path) as 'jailcell kernel --connect=SOCKET -f
{connection_file}', where Jupyter (JupyterLab, Notebook, VS Code,
nbclient, papermill) finds it:

  (default)     /usr/local/share/jupyter/kernels/NAME (needs root)
  --user        $JUPYTER_DATA_DIR/kernels/NAME, else
                $XDG_DATA_HOME/jupyter/kernels/NAME, else
                ~/.local/share/jupyter/kernels/NAME
  --prefix DIR  DIR/share/jupyter/kernels/NAME (a venv or conda env)

The kernel connects to the running service as the user Jupyter runs as,
who must be admitted by the service (its allowed uids or groups).`,
		Args: cobra.NoArgs,
	}
	hf := addHostFlags(install)
	hf.client = true // it only writes a kernelspec naming the socket
	fs := install.Flags()
	fs.BoolVar(&user, "user", false, "install for this user only")
	fs.StringVar(&prefix, "prefix", "", "install under DIR/share/jupyter/kernels (a virtual environment's prefix)")
	fs.StringVar(&name, "name", "jailcell", "kernel name (letters, digits, '.', '_', '-'): the directory and what notebooks record")
	fs.StringVar(&display, "display-name", "Python 3 (jailcell)", "name shown in Jupyter's kernel picker")
	fs.StringVar(&socket, "connect", "", "the service's socket the kernel connects to (default: the configured socket)")
	fs.StringVar(&policyName, "policy", "", "policy of each kernel's session (default: the default policy)")
	fs.Float64Var(&timeout, "timeout", 0, "every cell's time limit in seconds (0: the policy's default)")
	fs.Float64Var(&ttl, "ttl", 0, "each kernel's session idle timeout in seconds (0: the service's sessions.idle_ttl)")
	install.MarkFlagsMutuallyExclusive("user", "prefix")
	install.RunE = func(cmd *cobra.Command, _ []string) error {
		if !kernelNameRE.MatchString(name) {
			return fmt.Errorf("--name %q: use letters, digits, '.', '_' and '-' only (Jupyter's rule for kernel names)", name)
		}
		if timeout < 0 || ttl < 0 {
			return fmt.Errorf("--timeout %g, --ttl %g: must be >= 0 seconds", timeout, ttl)
		}
		if socket == "" {
			cfg, err := hf.config()
			if err != nil {
				return err
			}
			socket = cfg.Socket
		}
		sock, err := filepath.Abs(socket)
		if err != nil {
			return err
		}
		dir, err := kernelsDir(user, prefix)
		if err != nil {
			return err
		}
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary's path: %w", err)
		}
		if exe, err = filepath.EvalSymlinks(exe); err != nil {
			return fmt.Errorf("find this binary's path: %w", err)
		}
		// --connect=: the flag has an optional value, so a separate
		// argument would be taken for a positional one.
		argv := []string{exe, "kernel", "--connect=" + sock}
		if policyName != "" {
			argv = append(argv, "--policy", policyName)
		}
		if timeout > 0 {
			argv = append(argv, "--timeout", strconv.FormatFloat(timeout, 'g', -1, 64))
		}
		if ttl > 0 {
			argv = append(argv, "--ttl", strconv.FormatFloat(ttl, 'g', -1, 64))
		}
		argv = append(argv, "-f", "{connection_file}")
		spec := kernelspec{
			Argv:          argv,
			DisplayName:   display,
			Language:      "python",
			InterruptMode: "message",
			Metadata:      map[string]any{"debugger": false, "jailcell": map[string]any{"socket": sock, "version": version}},
		}
		b, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			return err
		}
		dest := filepath.Join(dir, name)
		if err := os.MkdirAll(dest, 0o755); err != nil {
			if os.IsPermission(err) && !user && prefix == "" {
				return fmt.Errorf("create %s: %w (use --user to install for yourself, or run as root)", dest, err)
			}
			return fmt.Errorf("create %s: %w", dest, err)
		}
		tmp, err := os.CreateTemp(dest, ".kernel.json-")
		if err != nil {
			return fmt.Errorf("write the kernelspec in %s: %w", dest, err)
		}
		defer os.Remove(tmp.Name())
		if _, err := tmp.Write(append(b, '\n')); err != nil {
			tmp.Close()
			return fmt.Errorf("write the kernelspec in %s: %w", dest, err)
		}
		if err := tmp.Chmod(0o644); err != nil {
			tmp.Close()
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		file := filepath.Join(dest, "kernel.json")
		if err := os.Rename(tmp.Name(), file); err != nil {
			return fmt.Errorf("install %s: %w", file, err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "installed kernelspec %q in %s\n", name, dest)
		// The client, not the kernelspec, picks the transport.
		fmt.Fprintln(cmd.OutOrStdout(), `its kernels refuse TCP peers of other uids; for Unix sockets in Jupyter's 0700 runtime directory instead, set the client's c.KernelManager.transport = "ipc" (e.g. jupyter lab --KernelManager.transport=ipc)`)
		return nil
	}
	cmd.AddCommand(install)
	return cmd
}

// kernelsDir is the kernels directory Jupyter searches for the chosen
// kind of install (jupyter_core.paths' rules on Linux).
func kernelsDir(user bool, prefix string) (string, error) {
	switch {
	case prefix != "":
		p, err := filepath.Abs(prefix)
		if err != nil {
			return "", err
		}
		return filepath.Join(p, "share", "jupyter", "kernels"), nil
	case user:
		if d := os.Getenv("JUPYTER_DATA_DIR"); d != "" {
			return filepath.Join(d, "kernels"), nil
		}
		if d := os.Getenv("XDG_DATA_HOME"); d != "" {
			return filepath.Join(d, "jupyter", "kernels"), nil
		}
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("--user: %w", err)
		}
		return filepath.Join(home, ".local", "share", "jupyter", "kernels"), nil
	}
	return systemKernelsDir, nil
}
