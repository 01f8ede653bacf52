package seam

import (
	"context"
	"io"
	"net"
)

// Workspace is one session's files as the host sees them, the API's view
// of session's workspace part: the Manager hands the part out
// (Manager.Workspace) rather than forwarding each file op, and the API
// names this interface because it may not name session's types.
type Workspace interface {
	Upload(ctx context.Context, owner int, id, path string, data []byte, metadata map[string]string) (*Entry, error)
	// UploadFrom is Upload for a door that streams: the bytes are
	// copied from r as they come, never held whole, and become path
	// once whole (a broken upload leaves path as it was).
	UploadFrom(ctx context.Context, owner int, id, path string, r io.Reader, metadata map[string]string) (*Entry, error)
	Download(ctx context.Context, owner int, id, path string) (*Download, error)
	// Open is Download for a door that streams: the file opened, not
	// read, so the daemon holds a descriptor, never the file's bytes.
	Open(ctx context.Context, owner int, id, path string) (*OpenFile, error)
	Files(ctx context.Context, owner int, id string) ([]Entry, error)
	Stat(ctx context.Context, owner int, id, path string) (*Entry, error)
	Remove(ctx context.Context, owner int, id, path string) error
	MakeDir(ctx context.Context, owner int, id, path string) (created bool, _ error)
	Rename(ctx context.Context, owner int, id, path, newPath string) (*Entry, error)
	Watch(ctx context.Context, owner int, id string, req WatchRequest) (*WatchResult, error)
	// DialPort connects to a server the session's cells started, on TCP
	// port of the sandbox's loopback, from inside its network namespace
	// (the sandbox's policy unchanged). The caller closes the connection;
	// a hibernation or the session's end closes it first.
	DialPort(ctx context.Context, owner int, id string, port int) (net.Conn, error)
}

// OpenFile is a workspace file opened for reading: a regular file, at
// most MaxFileBytes when opened. Its reader is the caller's to close.
type OpenFile struct {
	Path    string
	Size    int64
	Content io.ReadSeekCloser
}
