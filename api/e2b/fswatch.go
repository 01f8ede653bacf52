package e2b

import (
	"context"
	"strconv"
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

// startWatch starts a watch of the directory path names.
func (d *Door) startWatch(ctx context.Context, p string, recursive, includeEntry bool) (string, *connect.Error) {
	if includeEntry {
		// The SDKs send it only to envd 0.6.3 and later; this door is
		// EnvdVersion.
		return "", errorf(connect.CodeUnimplemented, "include_entry: events carry no entry here (envd %s); stat the path named by the event", EnvdVersion)
	}
	fp, err := mapPath(p)
	if err != nil {
		return "", pathError(err)
	}
	resp, e := d.fsCall(ctx, &api.Request{Op: api.OpWatch, Action: seam.WatchStart, Path: fp.rel, Recursive: recursive})
	if e != nil {
		return "", connectError(e)
	}
	return resp.Watch, nil
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
	id, cerr := s.d.startWatch(ctx, m.GetPath(), m.GetRecursive(), m.GetIncludeEntry())
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
	id, cerr := s.d.startWatch(ctx, m.GetPath(), m.GetRecursive(), m.GetIncludeEntry())
	if cerr != nil {
		return nil, cerr
	}
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents answers the changes since the watcher's last call (or
// its creation). A call sooner than 100 ms after the last answers none.
func (s fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	evs, cerr := s.d.pollWatch(ctx, req.Msg.GetWatcherId())
	if cerr != nil {
		return nil, cerr
	}
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: evs}), nil
}

func (s fsService) RemoveWatcher(ctx context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	if _, e := s.d.fsCall(ctx, &api.Request{Op: api.OpWatch, Action: seam.WatchStop, Watch: req.Msg.GetWatcherId()}); e != nil {
		return nil, connectError(e)
	}
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}
