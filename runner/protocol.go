package runner

import "bytes"

// The frame types of the kernel's protocol, as the host speaks it.
// FRAMES.md is the written contract: one row per type and direction, its
// fields and their bounds. TestFramesContract checks that file against
// frameTypes below, against the constants it quotes, and against the
// kernel's Python source, so a type added on either side without a row
// fails the build.

// frameType is the value of a frame's "t" key.
type frameType string

// Every frame type, either direction. A frame's "t" is set only from these
// (the contract test rejects a literal), and frameHead turns a received
// "t" into one of the kernel's, or "": a decoder cannot handle a type that
// is not in frameTypes.
const (
	frameExec    frameType = "exec"
	framePing    frameType = "ping"
	frameAssist  frameType = "assist"
	frameCommand frameType = "command"
	frameEnv     frameType = "env"
	frameHello   frameType = "hello"
	frameStarted frameType = "started"
	frameStream  frameType = "stream"
	frameDisplay frameType = "display"
	frameResult  frameType = "result"
	framePong    frameType = "pong"
)

// frameDir is who sends a frame.
type frameDir string

const (
	toKernel frameDir = "host->kernel"
	toHost   frameDir = "kernel->host"
)

// frameSpec is one row of the contract: a type, who sends it, and, for a
// request, the types of the kernel's frames that answer it (with the
// request's id), the last of them ending the exchange.
type frameSpec struct {
	T       frameType
	Dir     frameDir
	Answers []frameType
}

// frameTypes is the protocol, one entry per row of FRAMES.md's frame table.
var frameTypes = []frameSpec{
	{frameExec, toKernel, []frameType{frameStarted, frameStream, frameDisplay, frameResult}},
	{framePing, toKernel, []frameType{framePong}},
	{frameAssist, toKernel, []frameType{frameAssist}},
	{frameCommand, toKernel, []frameType{frameStream, frameCommand}},
	{frameEnv, toKernel, []frameType{frameEnv}},
	{frameHello, toHost, nil},
	{frameStarted, toHost, nil},
	{frameStream, toHost, nil},
	{frameDisplay, toHost, nil},
	{frameResult, toHost, nil},
	{framePong, toHost, nil},
	{frameAssist, toHost, nil},
	{frameCommand, toHost, nil},
	{frameEnv, toHost, nil},
}

// kernelFrameTypes are the types the kernel may send: the only ones
// frameHead reports.
var kernelFrameTypes = func() (ts []frameType) {
	for _, f := range frameTypes {
		if f.Dir == toHost {
			ts = append(ts, f.T)
		}
	}
	return ts
}()

// receivedType maps a frame's raw "t" (a JSON value, nil if absent) to the
// kernel frame type it names, or "" if it names none: an unknown type is
// ignored by every reader, as the kernel ignores the host's, so that either
// side can be newer.
func receivedType(raw []byte) frameType {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		// What the kernel sends, nothing escaped: compared as it is.
		body := raw[1 : len(raw)-1]
		for _, t := range kernelFrameTypes {
			if string(body) == string(t) {
				return t
			}
		}
		return ""
	}
	for _, t := range kernelFrameTypes {
		if stringIs(raw, string(t)) {
			return t
		}
	}
	return ""
}
