package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jailcell/jailcell/isolate"
	"github.com/jailcell/jailcell/policy"
	"github.com/jailcell/jailcell/rootfs"
	"github.com/jailcell/jailcell/session"
)

func main() {
	// Must come first: in a sandbox's init process it never returns.
	isolate.Init()

	rootfsDir := flag.String("rootfs", rootfs.DefaultBase, "the Python rootfs (make rootfs)")
	stateDir := flag.String("state-dir", "/var/lib/jailcell/embed", "sandbox state of this program")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *rootfsDir, *stateDir); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out *os.File, rootfsDir, stateDir string) error {
	r, err := rootfs.Open(rootfsDir)
	if err != nil {
		return err
	}
	host, err := isolate.NewHost(isolate.Config{
		StateDir:   stateDir + "/isolate",
		Rootfs:     r.Root,
		CgroupRoot: "/jailcell-embed", // its own: a host sweeps its root at start
	})
	if err != nil {
		return fmt.Errorf("sandbox host: %w", err)
	}
	strict := policy.Default()
	strict.MemoryBytes = 256 << 20
	strict.Timeout = 10 * time.Second
	m, err := session.New(session.Config{
		StateDir: stateDir + "/sessions",
		Policies: map[string]policy.Policy{"default": strict},
	}, host)
	if err != nil {
		return fmt.Errorf("session manager: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			log.Printf("shutdown: %v", err)
		}
		// The cgroup root goes too once its sandboxes are gone: a program
		// that exits leaves the host as it found it.
		if err := host.Close(); err != nil {
			log.Printf("close sandbox host: %v", err)
		}
	}()

	owner := os.Getuid()
	info, err := m.Create(ctx, session.CreateOptions{Owner: owner})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "session", info.ID)
	for _, code := range []string{
		"readings = [21.5, 22.1, 23.8]",
		"print(f'mean {sum(readings)/len(readings):.2f}')",
	} {
		res, err := m.Exec(ctx, owner, info.ID, session.ExecRequest{
			Code:     code,
			OnOutput: func(stream, text string) { fmt.Fprint(out, text) },
		})
		if err != nil {
			return err
		}
		if res.Status != session.StatusOK {
			return fmt.Errorf("cell %q: %s", code, res.Status)
		}
	}
	// A one-shot cell: a fresh sandbox, destroyed afterwards.
	res, err := m.RunOnce(ctx, owner, "", session.ExecRequest{Code: "import platform; print(platform.python_version())"})
	if err != nil {
		return err
	}
	fmt.Fprint(out, "one-shot python ", res.Stdout)
	return m.Close(ctx, owner, info.ID)
}
