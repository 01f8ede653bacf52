package isolate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

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

// RangeSize is the host uids (and gids) a Host with slots sandboxes maps.
func RangeSize(slots int) int {
	if slots == 0 {
		slots = 4096
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
	if base <= 0 || n <= 0 || base%idsPerSlot != 0 || uint64(base)+uint64(n) > 1<<32-1 {
		return nil, fmt.Errorf("uid range %d+%d: want a positive base, a multiple of %d, ending below 2^32-1", base, n, idsPerSlot)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create claim dir %s: %w", dir, err)
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
		pid    string
	}
	var live []held
	for _, e := range ents {
		lo, hi, ok := parseClaim(e.Name())
		if !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		alive, pid := claimLive(path)
		if !alive {
			_ = os.Remove(path) // its holder died
			continue
		}
		live = append(live, held{lo, hi, pid})
	}
	overlapping := func(base int) []string {
		var out []string
		for _, h := range live {
			if h.lo < base+n && base < h.hi {
				out = append(out, fmt.Sprintf("uids %d..%d (pid %s)", h.lo, h.hi-1, h.pid))
			}
		}
		return out
	}
	overlaps := overlapping(base)
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
		for b := top; b > base; b -= n {
			if len(overlapping(b)) == 0 {
				base, overlaps = b, nil
				break
			}
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
	return &UIDClaim{f: f, path: path, Base: base, Overlaps: overlaps}, nil
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
