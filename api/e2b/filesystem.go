package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jailcell/jailcell/api"
	fspb "github.com/jailcell/jailcell/api/e2b/proto/filesystem"
	"github.com/jailcell/jailcell/api/e2b/proto/filesystem/filesystemconnect"
	"github.com/jailcell/jailcell/session/seam"
)

// envd's filesystem service over a session's workspace ops (stat, mkdir,
// files, remove, upload, download, watch). Paths are mapped by mapPath;
// docs/e2b.md says what each call maps to and what it refuses.

func (d *Door) routeFilesystem(m *http.ServeMux) {
	p, h := filesystemconnect.NewFilesystemHandler(fsService{d},
		// A request message is a path or two: E2B's are far smaller.
		connect.WithReadMaxBytes(maxJSONBody))
	m.Handle(p, h)
	m.HandleFunc("GET /files", d.getFile)
	m.HandleFunc("POST /files", d.postFiles)
	m.HandleFunc("GET /envs", d.getEnvs)
}

type fsService struct{ d *Door }

var _ filesystemconnect.FilesystemHandler = fsService{}

// codeGone marks, inside this door only, a not_found that was the
// sandbox's rather than the file's: the SDKs expect a sandbox that is
// gone to look like E2B's proxy answering for it (Unavailable, 502), and
// a missing file to be NotFound.
const codeGone = "e2b_sandbox_gone"

// fsCall is d.call for a workspace op: a not_found or expired is checked
// against the sandbox, so that one that is gone is told apart from a
// missing path.
func (d *Door) fsCall(ctx context.Context, req *api.Request) (*api.Response, *api.Error) {
	t := targetOf(ctx)
	req.Session = t.id
	resp, e := d.call(ctx, t.owner, req, nil)
	if e != nil {
		return nil, d.goneOr(ctx, t.owner, t.id, e)
	}
	return resp, nil
}

// goneOr is e, an op's error on sandbox id, unless it is a not-found or
// expired because the sandbox itself is gone: that says so (the SDKs raise
// their sandbox-gone error, not a file's not-found).
func (d *Door) goneOr(ctx context.Context, owner int, id string, e *api.Error) *api.Error {
	if e.Code != api.CodeNotFound && e.Code != api.CodeExpired {
		return e
	}
	if _, ie := d.call(ctx, owner, &api.Request{Op: api.OpInfo, Session: id}, nil); ie != nil {
		if ie.Code == api.CodeNotFound || ie.Code == api.CodeExpired {
			return &api.Error{Code: codeGone, Message: "sandbox " + id + " is not running: " + ie.Message}
		}
		return ie
	}
	return e
}

// connectCodes maps the wire's codes to Connect's, as the SDKs act on
// them (NotFound: FileNotFoundError; Unavailable: the sandbox is gone).
var connectCodes = map[string]connect.Code{
	api.CodeBadRequest:  connect.CodeInvalidArgument,
	api.CodeNotFound:    connect.CodeNotFound,
	api.CodeExpired:     connect.CodeUnavailable,
	api.CodeLimit:       connect.CodeResourceExhausted,
	api.CodeBusy:        connect.CodeAborted,
	api.CodeUnavailable: connect.CodeUnavailable,
	codeGone:            connect.CodeUnavailable,
	"forbidden":         connect.CodePermissionDenied,
}

// connectError is a wire error as a Connect error, its message whole.
func connectError(e *api.Error) *connect.Error {
	c, ok := connectCodes[e.Code]
	if !ok {
		c = connect.CodeInternal
	}
	return connect.NewError(c, errors.New(e.Message))
}

// pathError refuses a path mapPath could not map: outside the workspace
// is PermissionDenied (the name is fine, the place is not served),
// anything else InvalidArgument.
func pathError(err error) *connect.Error {
	var out *outsideError
	if errors.As(err, &out) {
		return connect.NewError(connect.CodePermissionDenied, err)
	}
	return connect.NewError(connect.CodeInvalidArgument, err)
}

func errorf(c connect.Code, format string, a ...any) *connect.Error {
	return connect.NewError(c, fmt.Errorf(format, a...))
}

// entryInfo is E2B's EntryInfo of a workspace entry, as envd makes it: mode
// the permission bits, permissions Go's FileMode text of the entry itself,
// owner and group names. Unlike envd the door does not follow a symlink
// (it sees the workspace from the host): its type is SYMLINK, its mode 0,
// and its target the link's text made absolute against its directory.
func entryInfo(shown string, e *seam.Entry) *fspb.EntryInfo {
	t := fspb.FileType_FILE_TYPE_FILE
	fm := fs.FileMode(e.Mode & 0o777)
	switch {
	case e.Dir:
		t, fm = fspb.FileType_FILE_TYPE_DIRECTORY, fm|fs.ModeDir
	case e.Symlink:
		t, fm = fspb.FileType_FILE_TYPE_SYMLINK, fm|fs.ModeSymlink
	}
	if e.Mode&0o4000 != 0 {
		fm |= fs.ModeSetuid
	}
	if e.Mode&0o2000 != 0 {
		fm |= fs.ModeSetgid
	}
	if e.Mode&0o1000 != 0 {
		fm |= fs.ModeSticky
	}
	info := &fspb.EntryInfo{Name: path.Base(shown), Type: t, Path: shown, Size: e.Size,
		Mode: e.Mode & 0o777, Permissions: fm.String(), Owner: idName(e.UID), Group: idName(e.GID)}
	if e.Symlink {
		info.Mode = 0
		if e.Link != "" {
			target := e.Link
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(shown), target)
			}
			info.SymlinkTarget = &target
		}
	}
	if !e.ModTime.IsZero() {
		info.ModifiedTime = timestamppb.New(e.ModTime)
	}
	info.Metadata = e.Metadata
	return info
}

// idName names a sandbox's user or group id as its rootfs does for the two
// it has (root, nobody); any other is its number, as envd answers an id
// without a name.
func idName(id int) string {
	switch id {
	case 0:
		return "root"
	case 65534:
		return "nobody"
	}
	return strconv.Itoa(id)
}

// stat describes p; the workspace itself, which the stat op does not
// describe, is a directory while the sandbox runs.
func (d *Door) stat(ctx context.Context, p fsPath) (*fspb.EntryInfo, *api.Error) {
	if p.rel == "" {
		if _, e := d.fsCall(ctx, &api.Request{Op: api.OpInfo}); e != nil {
			return nil, e
		}
		return &fspb.EntryInfo{Name: path.Base(p.show()), Type: fspb.FileType_FILE_TYPE_DIRECTORY, Path: p.show()}, nil
	}
	resp, e := d.fsCall(ctx, &api.Request{Op: api.OpStat, Path: p.rel})
	if e != nil {
		return nil, e
	}
	return entryInfo(p.show(), resp.Entry), nil
}

func (s fsService) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	p, err := mapPath(req.Msg.GetPath())
	if err != nil {
		return nil, pathError(err)
	}
	info, e := s.d.stat(ctx, p)
	if e != nil {
		return nil, connectError(e)
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: info}), nil
}

func (s fsService) MakeDir(ctx context.Context, req *connect.Request[fspb.MakeDirRequest]) (*connect.Response[fspb.MakeDirResponse], error) {
	p, err := mapPath(req.Msg.GetPath())
	if err != nil {
		return nil, pathError(err)
	}
	if p.rel != "" {
		resp, e := s.d.fsCall(ctx, &api.Request{Op: api.OpMkdir, Path: p.rel})
		if e != nil {
			return nil, connectError(e)
		}
		if resp.Created != nil && *resp.Created {
			info, e := s.d.stat(ctx, p)
			if e != nil {
				return nil, connectError(e)
			}
			return connect.NewResponse(&fspb.MakeDirResponse{Entry: info}), nil
		}
	}
	// As envd: the SDKs' makeDir answers false on AlreadyExists.
	return nil, errorf(connect.CodeAlreadyExists, "directory already exists: %s", p.show())
}

func (s fsService) ListDir(ctx context.Context, req *connect.Request[fspb.ListDirRequest]) (*connect.Response[fspb.ListDirResponse], error) {
	p, err := mapPath(req.Msg.GetPath())
	if err != nil {
		return nil, pathError(err)
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	if p.rel != "" {
		dir, e := s.d.stat(ctx, p)
		if e != nil {
			return nil, connectError(e)
		}
		if dir.Type != fspb.FileType_FILE_TYPE_DIRECTORY {
			return nil, errorf(connect.CodeInvalidArgument, "path is not a directory: %s", p.show())
		}
	}
	resp, e := s.d.fsCall(ctx, &api.Request{Op: api.OpFiles})
	if e != nil {
		return nil, connectError(e)
	}
	entries := []*fspb.EntryInfo{}
	for i := range resp.Files {
		if _, ok := within(p.rel, resp.Files[i].Path, depth); ok {
			entries = append(entries, entryInfo(p.under(resp.Files[i].Path), &resp.Files[i]))
		}
	}
	return connect.NewResponse(&fspb.ListDirResponse{Entries: entries}), nil
}

// within says whether entry (relative to the workspace) is below dir
// (relative to the workspace, "" for all of it) at most depth levels
// down, and its path relative to dir.
func within(dir, entry string, depth int) (string, bool) {
	rel := entry
	if dir != "" {
		var ok bool
		if rel, ok = strings.CutPrefix(entry, dir+"/"); !ok {
			return "", false
		}
	}
	if rel == "" || strings.Count(rel, "/") >= depth {
		return "", false
	}
	return rel, true
}

func (s fsService) Remove(ctx context.Context, req *connect.Request[fspb.RemoveRequest]) (*connect.Response[fspb.RemoveResponse], error) {
	p, err := mapPath(req.Msg.GetPath())
	if err != nil {
		return nil, pathError(err)
	}
	if p.rel == "" {
		return nil, errorf(connect.CodeInvalidArgument, "path %s is the workspace itself, which cannot be removed; remove what is in it", p.show())
	}
	_, e := s.d.fsCall(ctx, &api.Request{Op: api.OpRemove, Path: p.rel})
	// envd removes with os.RemoveAll, which succeeds on a missing path;
	// fsCall has told a missing path from a sandbox that is gone.
	if e != nil && e.Code != api.CodeNotFound {
		return nil, connectError(e)
	}
	return connect.NewResponse(&fspb.RemoveResponse{}), nil
}

// Move is the rename op: one rename(2) in the sandbox's workspace, so a
// process in the sandbox sees the old path or the new, never a half-made
// copy, and a watch sees a rename. envd's answers are kept: a destination
// that is a directory, or that exists when the source is one, is
// AlreadyExists; the same path answers its entry.
func (s fsService) Move(ctx context.Context, req *connect.Request[fspb.MoveRequest]) (*connect.Response[fspb.MoveResponse], error) {
	src, err := mapPath(req.Msg.GetSource())
	if err != nil {
		return nil, pathError(err)
	}
	dst, err := mapPath(req.Msg.GetDestination())
	if err != nil {
		return nil, pathError(err)
	}
	if src.rel == "" || dst.rel == "" {
		return nil, errorf(connect.CodeInvalidArgument, "move %s to %s: the workspace itself cannot be moved or replaced; move what is in it", src.show(), dst.show())
	}
	from, e := s.d.stat(ctx, src)
	if e != nil {
		return nil, connectError(e)
	}
	if src.rel == dst.rel {
		from.Path, from.Name = dst.show(), path.Base(dst.show())
		return connect.NewResponse(&fspb.MoveResponse{Entry: from}), nil
	}
	if strings.HasPrefix(dst.rel, src.rel+"/") {
		return nil, errorf(connect.CodeInvalidArgument, "move %s to %s: a directory cannot be moved into itself", src.show(), dst.show())
	}
	to, e := s.d.stat(ctx, dst)
	switch {
	case e != nil && e.Code != api.CodeNotFound:
		return nil, connectError(e)
	case e == nil && to.Type == fspb.FileType_FILE_TYPE_DIRECTORY:
		return nil, errorf(connect.CodeAlreadyExists, "move %s to %s: the destination is a directory; name the new path itself", src.show(), dst.show())
	case e == nil && from.Type == fspb.FileType_FILE_TYPE_DIRECTORY:
		return nil, errorf(connect.CodeAlreadyExists, "move %s to %s: the destination exists and is not a directory", src.show(), dst.show())
	}
	resp, e := s.d.fsCall(ctx, &api.Request{Op: api.OpRename, Path: src.rel, To: dst.rel})
	if e != nil {
		return nil, connectError(e)
	}
	return connect.NewResponse(&fspb.MoveResponse{Entry: entryInfo(dst.show(), resp.Entry)}), nil
}
