package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of a Unix-socket connection, as the
// kernel recorded it at connect time (SO_PEERCRED, SO_PEERGROUPS). Nothing
// the client sends can change it.
type Peer struct {
	PID int32
	UID uint32
	GID uint32
	// Groups are the supplementary groups; nil where the kernel cannot
	// report them (before Linux 4.13).
	Groups []uint32
}

// Access lists who may call the HTTP service. Root (uid 0) always may; an
// empty Access admits root alone.
type Access struct {
	// UIDs are the users allowed.
	UIDs []uint32
	// GIDs admit a peer whose primary or any supplementary group is listed.
	GIDs []uint32
}

// Allows reports whether p may call.
func (a *Access) Allows(p Peer) bool {
	if p.UID == 0 || slices.Contains(a.UIDs, p.UID) || slices.Contains(a.GIDs, p.GID) {
		return true
	}
	for _, g := range p.Groups {
		if slices.Contains(a.GIDs, g) {
			return true
		}
	}
	return false
}

// maxPeerGroups bounds the supplementary group list read (the kernel's own
// NGROUPS_MAX).
const maxPeerGroups = 65536

// PeerOf reads the credentials of a Unix-socket connection's peer. Any other
// kind of connection is an error: without credentials nobody is admitted.
func PeerOf(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, fmt.Errorf("read peer credentials: %T is not a Unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("read peer credentials: %w", err)
	}
	var (
		p       Peer
		credErr error
	)
	err = raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			credErr = err
			return
		}
		p = Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}
		// Without SO_PEERGROUPS only the primary group counts: a peer is
		// admitted by less, never by more.
		p.Groups, _ = peerGroups(int(fd))
	})
	if err == nil {
		err = credErr
	}
	if err != nil {
		return Peer{}, fmt.Errorf("read peer credentials: %w", err)
	}
	return p, nil
}

// peerGroups reads SO_PEERGROUPS, growing the buffer when the kernel says
// it is too small (ERANGE, with the length it needs).
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 32)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == unix.ERANGE && int(n/4) > len(buf) && n/4 <= maxPeerGroups:
			buf = make([]uint32, n/4)
			continue
		case e != 0:
			return nil, e
		}
		return buf[:n/4], nil
	}
}

type peerKey struct{}

type peerInfo struct {
	peer Peer
	err  error
}

// peerContext is the server's ConnContext: the peer is read once per
// connection and travels with every request on it.
func peerContext(ctx context.Context, c net.Conn) context.Context {
	p, err := PeerOf(c)
	return context.WithValue(ctx, peerKey{}, peerInfo{p, err})
}

// PeerFromContext returns the peer of the connection a request came on.
func PeerFromContext(ctx context.Context) (Peer, error) {
	pi, ok := ctx.Value(peerKey{}).(peerInfo)
	if !ok {
		return Peer{}, errors.New("no peer credentials: the connection did not come through the jailcell HTTP server")
	}
	return pi.peer, pi.err
}
