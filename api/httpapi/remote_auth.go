package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// A TCP listener has no peer uid: the kernel cannot say who is at the
// other end of a connection from another host. Each request there must
// authenticate, by a bearer token or a verified client certificate, and
// the owner it maps to then plays the part the peer uid plays on the Unix
// socket (its sessions, root's view for owner 0).

// errRemoteConn marks a connection without peer credentials that came
// through a listener the server authenticates per request.
var errRemoteConn = errors.New("a TCP connection: the caller authenticates per request")

// errNoPeer: a Unix socket connection whose credentials could not be read.
var errNoPeer = errors.New("no peer credentials")

// RemoteAuth admits callers on a TCP listener (HTTPOptions.Remote). At
// least one way must be set; serve refuses to listen on TCP otherwise.
type RemoteAuth struct {
	tokens []tokenEntry
	// CertOwner, when set, maps a verified client certificate (mutual TLS;
	// the listener's tls.Config verifies the chain) to its owner uid.
	CertOwner func(cert *x509.Certificate) (uint32, error)
}

type tokenEntry struct {
	sum   [sha256.Size]byte
	owner uint32
}

// NewRemoteAuth builds an authenticator from tokens mapping each bearer
// token to its owner uid.
func NewRemoteAuth(tokens map[string]uint32) *RemoteAuth {
	a := &RemoteAuth{}
	for tok, owner := range tokens {
		a.tokens = append(a.tokens, tokenEntry{sha256.Sum256([]byte(tok)), owner})
	}
	return a
}

// Tokens reports how many bearer tokens a admits.
func (a *RemoteAuth) Tokens() int { return len(a.tokens) }

// owner authenticates one request.
func (a *RemoteAuth) owner(r *http.Request) (uint32, error) {
	if a.CertOwner != nil && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return a.CertOwner(r.TLS.VerifiedChains[0][0])
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return 0, errors.New("no credentials: send Authorization: Bearer <token>" + map[bool]string{true: " or a client certificate", false: ""}[a.CertOwner != nil])
	}
	// Compared as hashes, so every comparison is over the same length,
	// and against every entry with no early exit: the time taken says
	// nothing about how much of a token matched, or which.
	sum := sha256.Sum256([]byte(tok))
	var owner uint32
	found := 0
	for _, e := range a.tokens {
		eq := subtle.ConstantTimeCompare(sum[:], e.sum[:])
		owner = uint32(subtle.ConstantTimeSelect(eq, int(e.owner), int(owner)))
		found |= eq
	}
	if found != 1 {
		return 0, errors.New("the bearer token is not one of this node's")
	}
	return owner, nil
}

// connContext is the server's ConnContext: a Unix socket's peer is read
// once per connection; any other connection is marked for per-request
// authentication.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.(*net.UnixConn); ok {
		return peerContext(ctx, c)
	}
	return context.WithValue(ctx, peerKey{}, peerInfo{err: errRemoteConn})
}

// authenticate finds the caller of r. For a TCP connection it
// authenticates the request and returns r with the owner as its peer
// (PID 0), so everything downstream, /mcp included, sees a peer as on
// the Unix socket. ok is false when the caller is not admitted.
func (s *HTTPServer) authenticate(r *http.Request) (_ *http.Request, peer Peer, remote bool, err error) {
	peer, err = PeerFromContext(r.Context())
	if !errors.Is(err, errRemoteConn) {
		if err != nil {
			return r, peer, false, fmt.Errorf("%w: %w", errNoPeer, err)
		}
		if !s.access.Load().Allows(peer) {
			err = fmt.Errorf("uid %d (gid %d) may not use this jailcell service: it is not in the configured allowed uids or gids", peer.UID, peer.GID)
		}
		return r, peer, false, err
	}
	if s.opts.Remote == nil {
		return r, Peer{}, true, errors.New("this listener has no authentication configured")
	}
	owner, err := s.opts.Remote.owner(r)
	if err != nil {
		return r, Peer{}, true, err
	}
	peer = Peer{UID: owner, GID: owner}
	return r.WithContext(context.WithValue(r.Context(), peerKey{}, peerInfo{peer: peer})), peer, true, nil
}
