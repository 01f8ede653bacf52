package seam

// Watch actions.
const (
	WatchStart = "start"
	WatchPoll  = "poll"
	WatchStop  = "stop"
)

// Event types, E2B's names (its chmod is not reported).
const (
	EventCreate = "create"
	EventWrite  = "write"
	EventRemove = "remove"
	EventRename = "rename"
)

// WatchEvent is one change seen in a watched directory. Name is the
// path relative to that directory, as the sandbox named it: untrusted
// text (any bytes but / and NUL), JSON-escaped on the wire.
type WatchEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// WatchResult answers a watch request.
type WatchResult struct {
	Watch  string       `json:"watch"`
	Events []WatchEvent `json:"events"`
	// Overflow: more changes than MaxWatchEvents (or a scan that could
	// not complete) since the last poll; the events are only some of
	// them.
	Overflow bool `json:"overflow,omitempty"`
}

// WatchRequest starts, polls or stops a directory watch.
type WatchRequest struct {
	Action    string
	Path      string // start: the directory, relative to Workdir ("" for Workdir)
	Recursive bool
	Watch     string // poll, stop
}
