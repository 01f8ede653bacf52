package isolate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Several daemons on one host (a fleet on one machine, a test beside the
// service) must never map two sandboxes onto the same host uids: a
// sandbox of one daemon could then read and write the other's files as
// their owner. Each daemon claims its range in a shared directory with a
// file it holds flocked for its life; the kernel drops the lock when the
// process dies, so a crashed daemon's claim is stale, not live.

// ErrUIDRangeTaken: a live process holds a claim overlapping the range
// asked for.
var ErrUIDRangeTaken = errors.New("uid range in use by another jailcell")

// DefaultClaimDir is where daemons on this host claim their uid ranges.
const DefaultClaimDir = "/run/jailcell/claims"

// DefaultSlots is Config.Slots' default: sandboxes at once, each with
// its own uid range.
const DefaultSlots = 4096

// RangeSize is the host uids (and gids) a Host with slots sandboxes maps.
func RangeSize(slots int) int {
	if slots == 0 {
		slots = DefaultSlots
	}
	return slots * idsPerSlot
}

// UIDClaim is a held claim; Close releases it.
type UIDClaim struct {
	f    *os.File
	path string
	// Base is the first uid of the range claimed: the one asked for, or
	// with shareable the next free one when that was taken.
	Base int
	// Overlaps names live claims overlapping this one that were allowed
	// (ClaimUIDRange with shareable); empty otherwise.
	Overlaps []string
	// Recorded is the base the state directory had recorded before this
	// claim (ClaimStateRange); 0 at its first use.
	Recorded int
}

// Close lets the range go.
func (c *UIDClaim) Close() error {
	if c == nil || c.f == nil {
		return nil
	}
	_ = os.Remove(c.path)
	return c.f.Close()
}

// ClaimUIDRange claims host uids [base, base+n) for this process in dir.
// A live claim overlapping it is ErrUIDRangeTaken, naming the holder's pid
// and range, unless shareable (base is the default, not one configured):
// then the highest free range of n uids above base is claimed (Base says
// which), and if none is free, base itself with the overlap reported in
// Overlaps.
func ClaimUIDRange(dir string, base, n int, shareable bool) (*UIDClaim, error) {
	return claimRange(dir, base, n, shareable, "")
}

// claimRange is ClaimUIDRange for stateDir ("" none): the range claimed is
// left reserved for stateDir in dir after the claim is released, and a
// shareable claim avoids the ranges other state directories reserved, so
// a daemon down for a restart finds its range still free.
func claimRange(dir string, base, n int, shareable bool, stateDir string) (*UIDClaim, error) {
	if base <= 0 || n <= 0 || base%idsPerSlot != 0 || uint64(base)+uint64(n) > 1<<32-1 {
		return nil, fmt.Errorf("uid range %d+%d: want a positive base, a multiple of %d, ending below 2^32-1", base, n, idsPerSlot)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create claim dir %s: %w", dir, err)
	}
	// Claims decide which host uids sandboxes run as: a directory another
	// user made first (a fixed name in /tmp) or may write let them hold
	// the lock for good, delete running daemons' claims (two daemons then
	// map sandboxes onto the same uids) or plant links root writes through.
	if fi, err := os.Lstat(dir); err != nil {
		return nil, fmt.Errorf("claim dir %s: %w", dir, err)
	} else if st, ok := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("claim dir %s: want a directory of uid %d that no one else may write (mode %v); remove it or set sandbox.claim_dir", dir, os.Geteuid(), fi.Mode())
	}
	// One claimer at a time scans and writes, so two daemons starting
	// together cannot both see a free range.
	gate, err := os.OpenFile(filepath.Join(dir, "claims.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open claim lock in %s: %w", dir, err)
	}
	defer gate.Close()
	if err := unix.Flock(int(gate.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock claim dir %s: %w", dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read claim dir %s: %w", dir, err)
	}
	type held struct {
		lo, hi int
		who    string // "pid N", or "state dir D" for a reservation
	}
	var live, reserved []held
	var ours []string
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		if lo, hi, holder, ok := readReservation(path); ok {
			switch rec, _ := RecordedUIDBase(holder); {
			case holder == stateDir:
				ours = append(ours, path)
			case rec != lo:
				_ = os.Remove(path) // its state dir is gone or moved
			default:
				reserved = append(reserved, held{lo, hi, "state dir " + holder})
			}
			continue
		}
		lo, hi, ok := parseClaim(e.Name())
		if !ok {
			continue
		}
		alive, pid := claimLive(path)
		if !alive {
			_ = os.Remove(path) // its holder died
			continue
		}
		live = append(live, held{lo, hi, "pid " + pid})
	}
	overlapping := func(base int, also ...held) []string {
		var out []string
		for _, h := range append(live, also...) {
			if h.lo < base+n && base < h.hi {
				out = append(out, fmt.Sprintf("uids %d..%d (%s)", h.lo, h.hi-1, h.who))
			}
		}
		return out
	}
	overlaps := overlapping(base)
	if len(overlaps) == 0 && shareable && len(overlapping(base, reserved...)) > 0 {
		overlaps = overlapping(base, reserved...)
	}
	if len(overlaps) > 0 && !shareable {
		return nil, fmt.Errorf("%w: %d..%d overlaps %s; give each daemon on this host its own sandbox.uid_base, %d apart",
			ErrUIDRangeTaken, base, base+n-1, overlaps[0], n)
	}
	if len(overlaps) > 0 {
		// A daemon on the default range beside another one (a front door
		// run embedded beside the service, a test beside an installed one)
		// moves to the next free range: sharing host uids would let their
		// sandboxes share per-uid limits (RLIMIT_NPROC) and egress uplink
		// names. It looks from the top of the uid space down, away from
		// the ranges operators configure above the default. Only when no
		// range is free is the overlap taken, and reported.
		top := base
		for uint64(top)+2*uint64(n) <= 1<<32-1 {
			top += n
		}
		// A range another state directory reserved is taken only when
		// every other one is live.
		moved := false
		for _, also := range [][]held{reserved, nil} {
			for b := top; b > base && !moved; b -= n {
				if len(overlapping(b, also...)) == 0 {
					base, overlaps, moved = b, nil, true
				}
			}
		}
		if !moved {
			overlaps = overlapping(base)
		}
	}
	end := base + n
	path := filepath.Join(dir, fmt.Sprintf("uids-%d-%d.%d.%d", base, end, os.Getpid(), claimSeq.Add(1)))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create claim %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock claim %s: %w", path, err)
	}
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	if stateDir != "" {
		for _, o := range ours {
			_ = os.Remove(o)
		}
		resv := filepath.Join(dir, fmt.Sprintf("state-%d-%d.%s", base, end, pathHash(stateDir)))
		if err := writeNoFollow(resv, []byte(stateDir+"\n")); err != nil {
			_ = os.Remove(path)
			f.Close()
			return nil, fmt.Errorf("reserve uid range %d..%d for %s: %w", base, end-1, stateDir, err)
		}
	}
	return &UIDClaim{f: f, path: path, Base: base, Overlaps: overlaps}, nil
}

// readReservation reads a "state-LO-HI.HASH" file: the range a state
// directory keeps while its daemon is down.
func readReservation(path string) (lo, hi int, stateDir string, ok bool) {
	rest, ok := strings.CutPrefix(filepath.Base(path), "state-")
	if !ok {
		return 0, 0, "", false
	}
	lo, hi, ok = parseClaim("uids-" + rest)
	if !ok {
		return 0, 0, "", false
	}
	b, err := readSmall(path)
	if err != nil {
		return 0, 0, "", false
	}
	stateDir = strings.TrimSpace(string(b))
	return lo, hi, stateDir, filepath.IsAbs(stateDir)
}

// readSmall reads at most 4 KiB of the regular file at path, never through
// a symlink and never blocking on a FIFO: the claim records are a line
// each.
func readSmall(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4096))
}

// pathHash names a state directory in a file name.
func pathHash(p string) string {
	sum := sha256.Sum256([]byte(p))
	return hex.EncodeToString(sum[:8])
}

// claimSeq tells apart the claims of one process (tests).
var claimSeq atomic.Int64

// parseClaim reads "uids-LO-HI.PID.SEQ".
func parseClaim(name string) (lo, hi int, ok bool) {
	rest, ok := strings.CutPrefix(name, "uids-")
	if !ok {
		return 0, 0, false
	}
	rng, _, _ := strings.Cut(rest, ".")
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	return lo, hi, err1 == nil && err2 == nil && lo < hi
}

// claimLive reports whether a process holds the claim's lock, and its pid
// as written in it.
func claimLive(path string) (bool, string) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 16))
	pid := strings.TrimSpace(string(b))
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK), pid
	}
	return false, pid
}

// uidRangeFile, in a state directory, records the first uid its sandboxes
// are mapped to. Sessions kept across a restart (left running or
// hibernated) have their files owned by uids of that range, so a daemon
// restarted on another range could adopt none of them: the range is the
// state directory's own from its first use on.
const uidRangeFile = "uid-range"

// RecordedUIDBase is the uid base recorded in stateDir, or 0 if none is.
func RecordedUIDBase(stateDir string) (int, error) {
	b, err := readSmall(filepath.Join(stateDir, uidRangeFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read uid range of %s: %w", stateDir, err)
	}
	base, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || base <= 0 || base%idsPerSlot != 0 {
		return 0, fmt.Errorf("read uid range of %s: %q is not a uid base", stateDir, strings.TrimSpace(string(b)))
	}
	return base, nil
}

// ClaimStateRange claims the uid range of stateDir's sandboxes in claimDir:
// the range recorded there if there is one and base is not configured,
// else base (a default base may move to a free range, as ClaimUIDRange
// with shareable). The range claimed is recorded for the next start. A
// recorded range that a live daemon holds is ErrUIDRangeTaken naming its
// pid: moving would strand every session the state directory keeps.
func ClaimStateRange(claimDir, stateDir string, base, n int, configured bool) (*UIDClaim, error) {
	recorded, err := RecordedUIDBase(stateDir)
	if err != nil {
		return nil, err
	}
	shareable := !configured
	if recorded != 0 && !configured {
		base, shareable = recorded, false
	}
	c, err := claimRange(claimDir, base, n, shareable, stateDir)
	if err != nil {
		if recorded == base && errors.Is(err, ErrUIDRangeTaken) {
			return nil, fmt.Errorf("%s keeps its sandboxes on uids %d..%d (recorded in %s): %w",
				stateDir, base, base+n-1, filepath.Join(stateDir, uidRangeFile), err)
		}
		return nil, err
	}
	c.Recorded = recorded
	if recorded != c.Base {
		if err := writeRecord(stateDir, c.Base); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// writeRecord replaces stateDir's uid range record whole, so a crash leaves
// the old one or the new one.
func writeRecord(stateDir string, base int) error {
	path := filepath.Join(stateDir, uidRangeFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(base)+"\n"), 0o600); err != nil {
		return fmt.Errorf("record uid range of %s: %w", stateDir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("record uid range of %s: %w", stateDir, err)
	}
	return nil
}

// writeNoFollow replaces path with data, never writing through a link.
func writeNoFollow(path string, data []byte) error {
	_ = os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
