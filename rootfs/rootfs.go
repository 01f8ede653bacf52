package rootfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"
)

// DefaultBase is the directory that holds the rootfs versions and the
// current symlink.
const DefaultBase = "/var/lib/jailcell/rootfs"

// Sentinel errors; every error this package returns about a rootfs wraps one
// of them.
var (
	// ErrNotFound means no sealed rootfs is at the given path.
	ErrNotFound = errors.New("rootfs not found")
	// ErrCorrupt means a tree, its manifest or an archive of them is
	// malformed, unsafe, or does not match its content hash.
	ErrCorrupt = errors.New("rootfs corrupt")
)

const (
	manifestName = "manifest.json"
	treeName     = "root"
	currentName  = "current"
	hashPrefix   = "sha256:"
	// maxManifestBytes bounds the manifest reader; a real one is ~30 KB.
	maxManifestBytes = 4 << 20
	howToGet         = "build it with `make rootfs` or fetch it with `jailcell rootfs import`"
)

// versionRE is what a version directory may be called: it becomes a path
// component and a symlink target, so no separators, no dot-files.
// It is compiled on first use: `{0,127}` makes a large program, and every
// process of the binary (each sandbox's init too) would build it at start.
var versionRE = &lazyRegexp{expr: `^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`}

type lazyRegexp struct {
	once sync.Once
	expr string
	re   *regexp.Regexp
}

func (l *lazyRegexp) MatchString(s string) bool {
	l.once.Do(func() { l.re = regexp.MustCompile(l.expr) })
	return l.re.MatchString(s)
}

var hashRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Package is one installed Debian package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Manifest describes a sealed tree. It sits beside the tree, not inside it,
// so sealing does not change what it hashes.
type Manifest struct {
	// Version names the version directory: bookworm-<12 hex of the build
	// script and package list>.
	Version string `json:"version"`
	// BuiltAt is when the tree was sealed, UTC.
	BuiltAt time.Time `json:"built_at"`
	// PythonVersion is the tree's python3, e.g. "3.11.2".
	PythonVersion string `json:"python_version"`
	// Packages lists the installed Debian packages, sorted by name.
	Packages []Package `json:"packages"`
	// SizeBytes is the total size of the tree's regular files.
	SizeBytes int64 `json:"size_bytes"`
	// Files is the number of regular files in the tree.
	Files int `json:"files"`
	// ContentHash is Hash of the tree, "sha256:<hex>".
	ContentHash string `json:"content_hash"`
}

// Rootfs is an opened, sealed version.
type Rootfs struct {
	// Dir is the version directory, absolute with symlinks resolved, so a
	// later repoint of current does not change what it names.
	Dir string
	// Root is the tree, Dir/root: the overlay's lower layer.
	Root string
	// Manifest is the manifest as read from Dir/manifest.json.
	Manifest Manifest
}

// Open finds a sealed rootfs and reads its manifest. path may be a base
// directory (its current symlink is resolved), a version directory, or a
// version's root directory. Open does not hash the tree; see Verify.
func Open(path string) (*Rootfs, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open rootfs %s: %w", path, err)
	}
	dir, err := locate(abs)
	if err != nil {
		return nil, err
	}
	m, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	return &Rootfs{Dir: dir, Root: filepath.Join(dir, treeName), Manifest: *m}, nil
}

// locate maps any of the accepted paths to a resolved version directory.
func locate(p string) (string, error) {
	candidates := []string{p}
	if _, err := os.Lstat(filepath.Join(p, currentName)); err == nil {
		candidates = append(candidates, filepath.Join(p, currentName))
	}
	if filepath.Base(p) == treeName {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, c := range candidates {
		if !isVersionDir(c) {
			continue
		}
		dir, err := filepath.EvalSymlinks(c)
		if err != nil {
			return "", fmt.Errorf("open rootfs %s: %w", p, err)
		}
		return dir, nil
	}
	return "", fmt.Errorf("open rootfs %s: %w: no %s beside a %s directory there or under %s; %s",
		p, ErrNotFound, manifestName, treeName, currentName, howToGet)
}

func isVersionDir(d string) bool {
	m, err := os.Stat(filepath.Join(d, manifestName))
	if err != nil || !m.Mode().IsRegular() {
		return false
	}
	r, err := os.Stat(filepath.Join(d, treeName))
	return err == nil && r.IsDir()
}

func readManifest(dir string) (*Manifest, error) {
	f, err := os.Open(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, fmt.Errorf("read rootfs manifest in %s: %w", dir, err)
	}
	defer f.Close()
	m, err := decodeManifest(f)
	if err != nil {
		return nil, fmt.Errorf("read rootfs manifest in %s: %w", dir, err)
	}
	if m.Version != filepath.Base(dir) {
		return nil, fmt.Errorf("read rootfs manifest in %s: %w: manifest is for version %q",
			dir, ErrCorrupt, m.Version)
	}
	return m, nil
}

// decodeManifest reads and checks a manifest from untrusted input.
func decodeManifest(r io.Reader) (*Manifest, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("%w: manifest larger than %d bytes", ErrCorrupt, maxManifestBytes)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: parse manifest: %v", ErrCorrupt, err)
	}
	if !versionRE.MatchString(m.Version) {
		return nil, fmt.Errorf("%w: manifest version %q is not a valid version name", ErrCorrupt, m.Version)
	}
	if !hashRE.MatchString(m.ContentHash) {
		return nil, fmt.Errorf("%w: manifest content_hash %q is not sha256:<64 hex>", ErrCorrupt, m.ContentHash)
	}
	return &m, nil
}

// Verify recomputes the tree's content hash and compares it with the
// manifest. It reads every file: about a second per GB here.
func (r *Rootfs) Verify() error {
	got, _, _, err := Hash(r.Root)
	if err != nil {
		return fmt.Errorf("verify rootfs %s: %w", r.Dir, err)
	}
	if got != r.Manifest.ContentHash {
		return fmt.Errorf("verify rootfs %s: %w: tree hashes to %s, manifest says %s",
			r.Dir, ErrCorrupt, got, r.Manifest.ContentHash)
	}
	return nil
}

// Seal hashes versionDir/root and atomically writes versionDir/manifest.json;
// the version is versionDir's base name. The build script calls it (through
// `jailcell rootfs seal`) as its last step, so a manifest means a finished
// tree.
func Seal(versionDir string, packages []Package, pythonVersion string) (*Manifest, error) {
	dir, err := filepath.Abs(versionDir)
	if err != nil {
		return nil, fmt.Errorf("seal rootfs %s: %w", versionDir, err)
	}
	version := filepath.Base(dir)
	if !versionRE.MatchString(version) {
		return nil, fmt.Errorf("seal rootfs %s: %q is not a valid version name", dir, version)
	}
	if fi, err := os.Stat(filepath.Join(dir, treeName)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("seal rootfs %s: %w: no %s directory", dir, ErrNotFound, treeName)
	}
	sum, files, size, err := Hash(filepath.Join(dir, treeName))
	if err != nil {
		return nil, fmt.Errorf("seal rootfs %s: %w", dir, err)
	}
	pk := append([]Package(nil), packages...)
	sort.Slice(pk, func(i, j int) bool { return pk[i].Name < pk[j].Name })
	m := &Manifest{
		Version:       version,
		BuiltAt:       time.Now().UTC().Truncate(time.Second),
		PythonVersion: pythonVersion,
		Packages:      pk,
		SizeBytes:     size,
		Files:         files,
		ContentHash:   sum,
	}
	if err := writeManifest(dir, m); err != nil {
		return nil, fmt.Errorf("seal rootfs %s: %w", dir, err)
	}
	return m, nil
}

// writeManifest replaces dir/manifest.json atomically: readers see either no
// manifest or a whole one.
func writeManifest(dir string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".manifest-*.json")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, manifestName)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// setCurrent points base/current at version with a rename, so a reader never
// sees a missing or half-written link.
func setCurrent(base, version string) error {
	tmp := filepath.Join(base, fmt.Sprintf(".%s-%d-%x", currentName, os.Getpid(), rand.Uint64()))
	if err := os.Symlink(version, tmp); err != nil {
		return fmt.Errorf("point %s at %s: %w", filepath.Join(base, currentName), version, err)
	}
	if err := os.Rename(tmp, filepath.Join(base, currentName)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("point %s at %s: %w", filepath.Join(base, currentName), version, err)
	}
	return syncDir(base)
}
