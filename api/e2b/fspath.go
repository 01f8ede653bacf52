package e2b

import (
	"fmt"
	"path"
	"strings"

	"github.com/jailcell/jailcell/session/seam"
)

// E2B's SDKs name files by absolute paths in the sandbox user's home
// (/home/user/x.txt), by ~, or relative to that home; a jailcell session's
// files are its workspace, seam.Workdir. So that E2B programs run
// unchanged, the home is the workspace: relative paths, ~ and /home/user
// name /work, and /work is itself. Nothing else is reachable, read or
// write: the workspace ops reach only the workspace (host-side, through a
// root-confined open), and a path outside it is refused by name rather
// than quietly put somewhere else.

// e2bHome is the home of E2B's default user, where relative paths go.
const e2bHome = "/home/user"

// fsPath is a path of the workspace as a caller named it.
type fsPath struct {
	// rel is the path relative to seam.Workdir, clean; "" is the
	// workspace itself.
	rel string
	// base is the prefix the caller used, e2bHome or seam.Workdir; the
	// paths answered use it, so an E2B program finds the names it wrote.
	base string
}

// show is the path answered to the caller.
func (p fsPath) show() string { return joinRel(p.base, p.rel) }

// under is p's descendant rel (relative to the workspace), as the caller
// would name it.
func (p fsPath) under(rel string) string { return joinRel(p.base, rel) }

func joinRel(base, rel string) string {
	if rel == "" {
		return base
	}
	return base + "/" + rel
}

// allowedPaths says what a path may name, for every refusal of one.
const allowedPaths = "jailcell serves only the sandbox's workspace " + seam.Workdir +
	": name it as " + seam.Workdir + "/..., as E2B's home " + e2bHome + "/..., as ~/..., or relative to the home"

// outsideError is a path that names something outside the workspace.
type outsideError struct{ path string }

func (e *outsideError) Error() string {
	return fmt.Sprintf("path %q is outside the workspace: %s", e.path, allowedPaths)
}

// mapPath maps an E2B path to the workspace. ".." is resolved lexically
// before the prefix is checked, as envd resolves it; that is exact here
// because the workspace ops follow no symlink anywhere in a path. The
// remaining checks (NUL, length, file types) are the workspace ops' own.
func mapPath(p string) (fsPath, error) {
	orig := p
	switch {
	case p == "" || p == "~":
		p = e2bHome
	case strings.HasPrefix(p, "~/"):
		p = e2bHome + p[1:]
	case strings.HasPrefix(p, "~"):
		return fsPath{}, fmt.Errorf("path %q: ~ means the sandbox user's home; another user's (~name) is not served: %s", orig, allowedPaths)
	case !strings.HasPrefix(p, "/"):
		p = e2bHome + "/" + p
	}
	p = path.Clean(p)
	for _, base := range []string{e2bHome, seam.Workdir} {
		if p == base {
			return fsPath{base: base}, nil
		}
		if rel, ok := strings.CutPrefix(p, base+"/"); ok {
			return fsPath{rel: rel, base: base}, nil
		}
	}
	return fsPath{}, &outsideError{path: orig}
}
