package e2b

import (
	"context"
	"encoding/base64"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/jailcell/jailcell/api"
	fspb "github.com/jailcell/jailcell/api/e2b/proto/filesystem"
	"github.com/jailcell/jailcell/session/seam"
)

// envd watches with inotify; jailcell's watch op polls a host-side scan
// of the workspace (nothing runs in the sandbox), so WatchDir polls it.

const (
	// watchPollEvery is how often a WatchDir stream polls its watch. The
	// op answers a poll sooner than 100 ms after the last without a scan,
	// and bounds a session's watches, so a stream costs at most one
	// bounded scan per tick.
	watchPollEvery = 250 * time.Millisecond
	// watchEventCap is the most events one poll lists (the session's
	// MaxWatchEvents): a poll that lists that many and says overflow lost
	// the rest. One that overflows with fewer was a scan cut short, whose
	// changes the next poll reports.
	watchEventCap = 1000
	// The keepalive interval the client asks for (Keepalive-Ping-Interval,
	// seconds), its bounds and envd's default.
	keepaliveDefault = 90 * time.Second
	keepaliveMin     = time.Second
	keepaliveMax     = 10 * time.Minute
	// watchStopTimeout bounds stopping a stream's watch once its client
	// has gone.
	watchStopTimeout = 10 * time.Second
)

// eventTypes maps the watch op's event types to E2B's. The op reports no
// chmod.
var eventTypes = map[string]fspb.EventType{
	seam.EventCreate: fspb.EventType_EVENT_TYPE_CREATE,
	seam.EventWrite:  fspb.EventType_EVENT_TYPE_WRITE,
	seam.EventRemove: fspb.EventType_EVENT_TYPE_REMOVE,
	seam.EventRename: fspb.EventType_EVENT_TYPE_RENAME,
}

// fsEvents maps one poll's events; names stay relative to the watched
// directory, as envd's are. An event of a type this door does not know is
// dropped rather than sent as one the SDKs would misread.
func fsEvents(evs []seam.WatchEvent) []*fspb.FilesystemEvent {
	out := make([]*fspb.FilesystemEvent, 0, len(evs))
	for _, ev := range evs {
		if t, ok := eventTypes[ev.Type]; ok {
			out = append(out, &fspb.FilesystemEvent{Name: ev.Name, Type: t})
		}
	}
	return out
}

// lostEvents refuses a poll that lost events: inotify's overflow ends
// envd's watch with an error too, and a watcher that silently missed
// changes would be worse.
func lostEvents(resp *api.Response) *connect.Error {
	if resp.Overflow && len(resp.Events) >= watchEventCap {
		return errorf(connect.CodeResourceExhausted, "more than %d changes between two polls of the watch: events were lost; watch again", watchEventCap)
	}
	return nil
}

// startWatch starts a watch of the directory path names; dir is that
// directory as the caller named it.
func (d *Door) startWatch(ctx context.Context, p string, recursive bool) (id string, dir fsPath, _ *connect.Error) {
	fp, err := mapPath(p)
	if err != nil {
		return "", fsPath{}, pathError(err)
	}
	resp, e := d.fsCall(ctx, &api.Request{Op: api.OpWatch, Action: seam.WatchStart, Path: fp.rel, Recursive: recursive})
	if e != nil {
		return "", fsPath{}, connectError(e)
	}
	return resp.Watch, fp, nil
}

func (d *Door) pollWatch(ctx context.Context, id string) ([]*fspb.FilesystemEvent, *connect.Error) {
	resp, e := d.fsCall(ctx, &api.Request{Op: api.OpWatch, Action: seam.WatchPoll, Watch: id})
	if e != nil {
		return nil, connectError(e)
	}
	if err := lostEvents(resp); err != nil {
		return nil, err
	}
	return fsEvents(resp.Events), nil
}

// withEntries adds to each event the entry of the path it names below
// dir, where one is there to stat (include_entry): never to a removal,
// and not to a name gone again since (as envd, best effort).
func (d *Door) withEntries(ctx context.Context, dir fsPath, evs []*fspb.FilesystemEvent) {
	for _, ev := range evs {
		if ev.Type == fspb.EventType_EVENT_TYPE_REMOVE {
			continue
		}
		p := fsPath{base: dir.base, rel: path.Join(dir.rel, ev.Name)}
		if info, e := d.stat(ctx, p); e == nil {
			ev.Entry = info
		}
	}
}

// A watcher (CreateWatcher) that includes entries carries its directory
// in the id it is answered, after entryWatchSep: the door keeps no state
// per watcher, and the directory is only stat'ed through the session's
// own confined stat, so a forged one reaches nothing the caller could not
// stat anyway.
const entryWatchSep = "+entries:"

func entryWatchID(id string, dir fsPath) string {
	return id + entryWatchSep + base64.RawURLEncoding.EncodeToString([]byte(dir.show()))
}

// splitWatchID is the session's watch id in a watcher id, with the
// directory to stat entries in if it asks for them.
func splitWatchID(id string) (watch string, dir fsPath, entries bool, _ *connect.Error) {
	watch, enc, entries := strings.Cut(id, entryWatchSep)
	if !entries {
		return id, fsPath{}, false, nil
	}
	shown, err := base64.RawURLEncoding.DecodeString(enc)
	if err == nil {
		dir, err = mapPath(string(shown))
	}
	if err != nil {
		return "", fsPath{}, false, errorf(connect.CodeInvalidArgument, "watcher id %.80q: not one this sandbox answered", id)
	}
	return watch, dir, true, nil
}

// keepaliveOf is the keepalive interval a request asks for, bounded.
func keepaliveOf(h string) time.Duration {
	n, err := strconv.Atoi(h)
	if err != nil {
		return keepaliveDefault
	}
	return min(max(time.Duration(n)*time.Second, keepaliveMin), keepaliveMax)
}

// WatchDir streams the changes below a directory: StartEvent once the
// watch is in place, then its events, a KeepAlive when nothing else was
// sent for the asked interval. It ends when the client goes away (or its
// deadline passes), stopping the watch, or with an error when the sandbox
// ends or events were lost.
func (s fsService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	m := req.Msg
	id, dir, cerr := s.d.startWatch(ctx, m.GetPath(), m.GetRecursive())
	if cerr != nil {
		return cerr
	}
	defer func() {
		// The request's context is done by now: a context of its own,
		// bounded, so the watch is never left behind.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), watchStopTimeout)
		defer cancel()
		s.d.fsCall(sctx, &api.Request{Op: api.OpWatch, Action: seam.WatchStop, Watch: id})
	}()
	if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	every := keepaliveOf(req.Header().Get("Keepalive-Ping-Interval"))
	keepalive := time.NewTimer(every)
	defer keepalive.Stop()
	poll := time.NewTicker(watchPollEvery)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-keepalive.C:
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			keepalive.Reset(every)
		case <-poll.C:
			evs, cerr := s.d.pollWatch(ctx, id)
			if cerr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return cerr
			}
			if m.GetIncludeEntry() {
				s.d.withEntries(ctx, dir, evs)
			}
			for _, ev := range evs {
				if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
					return err
				}
			}
			if len(evs) > 0 {
				keepalive.Reset(every)
			}
		}
	}
}

func (s fsService) CreateWatcher(ctx context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	m := req.Msg
	id, dir, cerr := s.d.startWatch(ctx, m.GetPath(), m.GetRecursive())
	if cerr != nil {
		return nil, cerr
	}
	if m.GetIncludeEntry() {
		id = entryWatchID(id, dir)
	}
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents answers the changes since the watcher's last call (or
// its creation). A call sooner than 100 ms after the last answers none.
func (s fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	id, dir, entries, cerr := splitWatchID(req.Msg.GetWatcherId())
	if cerr != nil {
		return nil, cerr
	}
	evs, cerr := s.d.pollWatch(ctx, id)
	if cerr != nil {
		return nil, cerr
	}
	if entries {
		s.d.withEntries(ctx, dir, evs)
	}
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: evs}), nil
}

func (s fsService) RemoveWatcher(ctx context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	id, _, _, cerr := splitWatchID(req.Msg.GetWatcherId())
	if cerr != nil {
		return nil, cerr
	}
	if _, e := s.d.fsCall(ctx, &api.Request{Op: api.OpWatch, Action: seam.WatchStop, Watch: id}); e != nil {
		return nil, connectError(e)
	}
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}
