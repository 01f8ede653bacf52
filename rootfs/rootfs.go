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

// profileRE is what a profile may be called; debPackageRE is Debian
// policy's package name (section 5.6.1). Both come from an untrusted
// manifest on import and end up in a terminal.
var (
	profileRE    = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	debPackageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{1,99}$`)
)

// maxProfilePackages bounds a manifest's profile_packages list; the default
// profile names about 30.
const maxProfilePackages = 1000

// Profile is the package set a rootfs was built from (runtime/build-rootfs.sh):
// "default" with the data-science stack, "minimal" for small hosts.
type Profile struct {
	// Name is the profile's name, e.g. "default" or "minimal".
	Name string
	// Packages are the Debian packages the profile asks for; their
	// dependencies come along and are in Manifest.Packages.
	Packages []string
}

// Package is one installed Debian package.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Manifest describes a sealed tree. It sits beside the tree, not inside it,
// so sealing does not change what it hashes.
type Manifest struct {
	// Version names the version directory:
	// bookworm-<profile>-<12 hex of the build script and package list>
	// (bookworm-<12 hex> before profiles).
	Version string `json:"version"`
	// Profile is the build profile ("default", "minimal"); empty for a
	// rootfs built before profiles existed.
	Profile string `json:"profile,omitempty"`
	// ProfilePackages are the packages the profile asked for, sorted; each
	// is in Packages.
	ProfilePackages []string `json:"profile_packages,omitempty"`
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
	if err := checkProfile(m.Profile, m.ProfilePackages); err != nil {
		return nil, fmt.Errorf("%w: manifest %v", ErrCorrupt, err)
	}
	return &m, nil
}

// checkProfile checks a profile's name and package list.
func checkProfile(name string, packages []string) error {
	if name == "" && len(packages) == 0 {
		return nil // built before profiles
	}
	if !profileRE.MatchString(name) {
		return fmt.Errorf("profile %q: want a name of 1-32 characters from a-z, 0-9 and -, starting with a letter", name)
	}
	if len(packages) == 0 || len(packages) > maxProfilePackages {
		return fmt.Errorf("profile %s names %d packages: want 1 to %d", name, len(packages), maxProfilePackages)
	}
	for _, p := range packages {
		if !debPackageRE.MatchString(p) {
			return fmt.Errorf("profile %s: %q is not a Debian package name (a-z, 0-9, +, -, .; 2-100 characters)", name, p)
		}
	}
	return nil
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
// tree. Every package the profile asks for must be among packages; a zero
// Profile records none.
func Seal(versionDir string, packages []Package, pythonVersion string, profile Profile) (*Manifest, error) {
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
	want := append([]string(nil), profile.Packages...)
	sort.Strings(want)
	if err := checkProfile(profile.Name, want); err != nil {
		return nil, fmt.Errorf("seal rootfs %s: %w", dir, err)
	}
	installed := make(map[string]bool, len(packages))
	for _, p := range packages {
		installed[p.Name] = true
	}
	for _, p := range want {
		if !installed[p] {
			return nil, fmt.Errorf("seal rootfs %s: profile %s asks for %s, which the tree's dpkg database does not list as installed", dir, profile.Name, p)
		}
	}
	sum, files, size, err := Hash(filepath.Join(dir, treeName))
	if err != nil {
		return nil, fmt.Errorf("seal rootfs %s: %w", dir, err)
	}
	pk := append([]Package(nil), packages...)
	sort.Slice(pk, func(i, j int) bool { return pk[i].Name < pk[j].Name })
	m := &Manifest{
		Version:         version,
		Profile:         profile.Name,
		ProfilePackages: want,
		BuiltAt:         time.Now().UTC().Truncate(time.Second),
		PythonVersion:   pythonVersion,
		Packages:        pk,
		SizeBytes:       size,
		Files:           files,
		ContentHash:     sum,
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
