package e2b

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"

	"github.com/jailcell/jailcell/api"
)

// A sandbox's own servers, as E2B's proxy reaches them: a request to any
// port but envd's and the interpreter's (E2b-Sandbox-Port, or a
// PORT-ID.DOMAIN host: the SDKs' getHost) is passed to a server a cell
// started on that port of the sandbox's loopback, through a connection
// the host makes from inside the sandbox (api.PortDialer). The sandbox's
// network policy is unchanged. What comes back is the sandbox's and
// untrusted: its header block is bounded, its body streamed through, never
// held.

// maxPortHeaderBytes bounds the header block a sandbox's server answers
// with: the daemon reads it whole before passing anything on.
const maxPortHeaderBytes = 64 << 10

// maxPortBody bounds a request body passed to a sandbox's server: an
// upload's bound, as the body is streamed through, never held.
const maxPortBody = maxUploadBody

// portHeaderTimeout bounds the wait for a sandbox's server to begin its
// answer, so a server that never answers frees the request's place.
const portHeaderTimeout = 5 * time.Minute

// doorHeaders are the door's own request headers, never passed to the
// sandbox's server: its credentials (the sandbox's token would let the
// sandbox's code act as its caller on envd) and routing.
var doorHeaders = []string{"X-Access-Token", "E2b-Traffic-Access-Token", "X-Api-Key", "E2b-Sandbox-Id", "E2b-Sandbox-Port"}

// sentToken says whether r carries a sandbox token (valid or not): such a
// request is judged by it, never admitted as public traffic instead.
func sentToken(r *http.Request) bool {
	return r.Header.Get("X-Access-Token") != "" || r.Header.Get("E2B-Traffic-Access-Token") != ""
}

// publicOwner admits a request without a token to sandbox id's ports when
// the door lets ports be public and the sandbox, made through this door,
// did not ask for private ones. One answer for every refusal: a caller
// without credentials must not learn which ids exist.
func (d *Door) publicOwner(id string) (int, error) {
	rec, ok := d.records.get(id)
	if !d.o.PublicPorts || !ok || rec.PrivatePorts {
		return 0, fmt.Errorf("sandbox %s: its ports need its access token: send it as e2b-traffic-access-token (the trafficAccessToken create and connect return)", id)
	}
	return rec.Owner, nil
}

// proxyPort passes r to the server on port of the request's sandbox.
func (d *Door) proxyPort(w http.ResponseWriter, r *http.Request, port int) {
	pd, ok := d.h.(api.PortDialer)
	if !ok {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("port %d: this door reaches only envd (%d) and the code interpreter (%d) of a sandbox on another node", port, EnvdPort, InterpreterPort))
		return
	}
	if !d.running(w, r) {
		return
	}
	if ab, ok := r.Body.(*admittedBody); ok {
		// Streamed to the sandbox through the proxy's buffer: the place
		// keeps its first weight instead of growing by every byte.
		ab.r = ab.raw
	}
	t := targetOf(r.Context())
	// One connection per request, closed with it: nothing pooled outlives
	// the request, so no idle connection holds a place in the sandbox's
	// bound or stops a hibernation (isolate.MaxDialed).
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, e := pd.DialPort(ctx, t.owner, t.id, port)
			if e != nil {
				return nil, errors.New(e.Message)
			}
			return c, nil
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxPortHeaderBytes,
		ResponseHeaderTimeout:  portHeaderTimeout,
	}
	defer tr.CloseIdleConnections()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			pr.Out.Host = pr.In.Host // the app sees the host its client asked for
			for _, h := range doorHeaders {
				pr.Out.Header.Del(h)
			}
			pr.SetXForwarded()
		},
		Transport:     tr,
		FlushInterval: -1, // server-sent events and long polls come as they are written
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			d.log.Debug("e2b port proxy", "sandbox", t.id, "port", port, "err", err)
			writeError(w, http.StatusBadGateway, fmt.Sprintf("port %d of sandbox %s: %v", port, t.id, err))
		},
	}
	rp.ServeHTTP(w, r)
}
