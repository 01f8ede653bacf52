package session

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/internal/confined"
)

// A file's metadata is a small map of printable-ASCII keys and values kept
// in the file's own extended attributes, under E2B's namespace
// (user.e2b.KEY): the same map whichever front door wrote it, what a tool
// in the sandbox sets with setxattr, and what travels with the file when
// a session is copied (fork, hibernate, the store: user.* attributes
// travel). Every write the host makes replaces the map with the one it was
// given, none clearing it, as E2B's envd does.
const (
	// MetadataPrefix is the extended attribute namespace of metadata.
	MetadataPrefix = "user.e2b."
	// MaxMetadataKey bounds one key: the kernel's 255-byte attribute name
	// less the prefix.
	MaxMetadataKey = 255 - len(MetadataPrefix)
	// MaxMetadataBytes bounds a file's metadata: every key with its prefix
	// and every value, in all (E2B's bound, within one filesystem block).
	MaxMetadataBytes = 4096
)

// checkMetadata refuses a map that breaks the bounds above, naming the key.
func checkMetadata(m map[string]string) error {
	total := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		switch {
		case k == "":
			return fmt.Errorf("%w: metadata key is empty; keys are 1 to %d printable ASCII bytes", ErrBadRequest, MaxMetadataKey)
		case len(k) > MaxMetadataKey:
			return fmt.Errorf("%w: metadata key %.40q... is %d bytes, at most %d", ErrBadRequest, k, len(k), MaxMetadataKey)
		case !printable(k):
			return fmt.Errorf("%w: metadata key %q: keys are printable ASCII (0x20-0x7e) only", ErrBadRequest, k)
		case !printable(v):
			return fmt.Errorf("%w: metadata value of %q: values are printable ASCII (0x20-0x7e) only", ErrBadRequest, k)
		}
		total += len(MetadataPrefix) + len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return fmt.Errorf("%w: metadata of %d bytes (each key counted with its %d-byte %s prefix), at most %d", ErrBadRequest, total, len(MetadataPrefix), MetadataPrefix, MaxMetadataBytes)
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// setMetadata replaces the metadata of the regular file open for writing
// at fd with m (already checked).
func setMetadata(fd int, m map[string]string) error {
	old, err := metadataNames(func(buf []byte) (int, error) { return unix.Flistxattr(fd, buf) })
	if err != nil {
		return fmt.Errorf("list metadata: %w", err)
	}
	for _, name := range old {
		if _, keep := m[strings.TrimPrefix(name, MetadataPrefix)]; keep {
			continue
		}
		if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("remove metadata %s: %w", name, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := unix.Fsetxattr(fd, MetadataPrefix+k, []byte(m[k]), 0); err != nil {
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.E2BIG) {
				return fmt.Errorf("%w: no room for metadata %s", ErrLimit, k)
			}
			return fmt.Errorf("set metadata %s: %w", k, err)
		}
	}
	return nil
}

// metadataNames lists the user.e2b.* attribute names that list (a
// listxattr) reports, reading at most the kernel's 64 KiB list.
func metadataNames(list func([]byte) (int, error)) ([]string, error) {
	buf := make([]byte, 1024)
	n, err := list(buf)
	if errors.Is(err, unix.ERANGE) {
		buf = make([]byte, 64<<10) // XATTR_LIST_MAX: no list is longer
		n, err = list(buf)
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if strings.HasPrefix(name, MetadataPrefix) && len(name) > len(MetadataPrefix) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// readMetadata is the metadata of name in the directory open at dirfd
// whose lstat is st, nil if it has none. Only regular files and
// directories carry user attributes. The attributes are the sandbox's
// own to set, so they are read as untrusted: by the directory's /proc link
// and the one name below it with the l*xattr calls (nothing is opened, so
// a FIFO swapped in blocks nothing; a symlink is never followed), and
// bounded as a write is (MaxMetadataBytes in all; keys or values the host
// would refuse are left out, as are keys past the bound, in name order).
// A name swapped meanwhile shows another file of the same sandbox.
func readMetadata(dirfd int, name string, st *unix.Stat_t) map[string]string {
	if !confined.IsType(st, unix.S_IFREG) && !confined.IsType(st, unix.S_IFDIR) {
		return nil
	}
	// One name below the directory, never a path: ".." or a slash would
	// leave the confined directory (a path walk out of the workspace).
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil
	}
	p := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
	names, err := metadataNames(func(buf []byte) (int, error) { return unix.Llistxattr(p, buf) })
	if err != nil || len(names) == 0 {
		return nil
	}
	out := map[string]string{}
	total := 0
	val := make([]byte, MaxMetadataBytes)
	for _, attr := range names {
		k := strings.TrimPrefix(attr, MetadataPrefix)
		n, err := unix.Lgetxattr(p, attr, val)
		if err != nil { // ERANGE: longer than any metadata the host writes
			continue
		}
		v := string(val[:n])
		if len(k) > MaxMetadataKey || !printable(k) || !printable(v) {
			continue
		}
		if total += len(attr) + n; total > MaxMetadataBytes {
			break
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
