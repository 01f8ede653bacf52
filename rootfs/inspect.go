package rootfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
)

const (
	dpkgStatus = "var/lib/dpkg/status"
	// maxStatusBytes bounds the dpkg status reader; the real one is ~1 MB.
	maxStatusBytes = 64 << 20
)

var pythonRE = regexp.MustCompile(`^python(3\.[0-9]+)$`)

// Inspect reads what Seal records from a tree without running anything in
// it: the installed packages from the dpkg database, and the python3 version
// from the usr/bin/python3 symlink (or the usr/lib/python3.N directory),
// refined to the patch level by the python3.N package's version. All reads are
// confined to root.
func Inspect(root string) (pythonVersion string, packages []Package, err error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", nil, fmt.Errorf("inspect rootfs tree %s: %w", root, err)
	}
	defer r.Close()
	f, err := r.Open(dpkgStatus)
	if err != nil {
		return "", nil, fmt.Errorf("inspect rootfs tree %s: %w", root, err)
	}
	packages, err = parseDpkgStatus(f)
	f.Close()
	if err != nil {
		return "", nil, fmt.Errorf("inspect rootfs tree %s: read %s: %w", root, dpkgStatus, err)
	}
	minor, err := pythonMinor(r)
	if err != nil {
		return "", nil, fmt.Errorf("inspect rootfs tree %s: %w", root, err)
	}
	pythonVersion = minor
	for _, p := range packages {
		if p.Name != "python"+minor && p.Name != "python"+minor+"-minimal" {
			continue
		}
		if v := upstreamVersion(p.Version); strings.HasPrefix(v, minor+".") {
			pythonVersion = v
			break
		}
	}
	return pythonVersion, packages, nil
}

// pythonMinor returns "3.N" for the tree's python3.
func pythonMinor(r *os.Root) (string, error) {
	if target, err := r.Readlink("usr/bin/python3"); err == nil {
		if m := pythonRE.FindStringSubmatch(path.Base(target)); m != nil {
			return m[1], nil
		}
	}
	entries, err := fs.ReadDir(r.FS(), "usr/lib")
	if err != nil {
		return "", fmt.Errorf("find python3: %w", err)
	}
	var found []string
	for _, e := range entries {
		if m := pythonRE.FindStringSubmatch(e.Name()); m != nil && e.IsDir() {
			found = append(found, m[1])
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("find python3: usr/bin/python3 is not a python3.N symlink and usr/lib has %d python3.N directories", len(found))
	}
	return found[0], nil
}

// upstreamVersion strips a Debian version's epoch and revision:
// "1:3.11.2-6+deb12u6" is "3.11.2".
func upstreamVersion(v string) string {
	if i := strings.IndexByte(v, ':'); i >= 0 {
		v = v[i+1:]
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		v = v[:i]
	}
	return v
}

// parseDpkgStatus returns the installed packages in a dpkg status file
// (deb822 paragraphs), sorted by name.
func parseDpkgStatus(rd io.Reader) ([]Package, error) {
	lr := &io.LimitedReader{R: rd, N: maxStatusBytes + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var (
		pkgs                  []Package
		name, version, status string
	)
	flush := func() {
		if name != "" && strings.HasSuffix(status, " installed") {
			pkgs = append(pkgs, Package{Name: name, Version: version})
		}
		name, version, status = "", "", ""
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue // continuation of a multi-line field
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Package":
			name = val
		case "Version":
			version = val
		case "Status":
			status = val
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("larger than %d bytes", maxStatusBytes)
	}
	flush()
	if len(pkgs) == 0 {
		return nil, errors.New("no installed packages")
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return pkgs, nil
}
