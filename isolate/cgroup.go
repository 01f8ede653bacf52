package isolate

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Usage is what a sandbox has cost, read from its cgroup on the host side
// (never from anything the sandbox reports about itself).
type Usage struct {
	// CPU is user+system CPU time of every task in the sandbox.
	CPU time.Duration
	// MemoryPeak is the high-water mark of memory charged to the sandbox
	// since the last ResetPeak that returned true, else since it started.
	MemoryPeak int64
	// MemoryCurrent is the memory charged right now.
	MemoryCurrent int64
	// OOMKills counts tasks killed by the OOM killer inside the sandbox.
	OOMKills uint64
	// PidsDenied counts forks refused because the pids limit was reached.
	PidsDenied uint64
}

// cgroupFiles reads the counters of one sandbox cgroup in either layout:
// v1 (one directory per controller) or v2 (one unified directory).
type cgroupFiles struct {
	v2    bool
	paths map[string]string // controller ("" for v2) -> directory
	// open keeps the counter files open between reads (nil: open each
	// time). A cell reads them twice; open+read+close of each file was
	// the largest host-side cost of a trivial cell.
	open *openFiles
}

// openFiles caches open cgroup counter files, read with pread.
type openFiles struct {
	mu     sync.Mutex
	files  map[string]*os.File
	buf    []byte
	closed bool // after close: read without caching, so nothing leaks
}

func newOpenFiles() *openFiles {
	return &openFiles{files: map[string]*os.File{}, buf: make([]byte, 4096)}
}

// view calls fn with the content of path (at most 4 KiB: counter files
// are small), read through the cached descriptor into the shared buffer,
// without a copy: a cell reads eight counter files, and their copies and
// scanners were most of the garbage a trivial cell made. fn must not keep
// b. With written, the read goes through the read-write descriptor that
// write opened for read-back, if there is one: reading memory.peak through
// the fd that reset it gives the peak since that reset (Linux >= 6.12);
// any other fd gives the lifetime peak.
func (o *openFiles) view(path string, written bool, fn func(b []byte)) error {
	if o == nil {
		b, err := os.ReadFile(path)
		if err == nil {
			fn(b)
		}
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		b, err := os.ReadFile(path)
		if err == nil {
			fn(b)
		}
		return err
	}
	var f *os.File
	ok := false
	if written {
		f, ok = o.files["rw:"+path]
	}
	if !ok {
		if f, ok = o.files[path]; !ok {
			var err error
			if f, err = os.Open(path); err != nil {
				return err
			}
			o.files[path] = f
		}
	}
	n, err := f.ReadAt(o.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	fn(o.buf[:n])
	return nil
}

// write writes data to path through a cached write-only descriptor.
// With readBack the descriptor is opened read-write and kept for view
// (written); without a cache (nil or closed), readBack fails, since the
// write would be lost with its descriptor.
func (o *openFiles) write(path string, data []byte, readBack bool) error {
	mode, key := os.O_WRONLY, "w:"+path
	if readBack {
		mode, key = os.O_RDWR, "rw:"+path
	}
	if o == nil {
		if readBack {
			return errors.New("no descriptor cache to read the write back through")
		}
		return os.WriteFile(path, data, 0)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		if readBack {
			return errors.New("descriptor cache closed")
		}
		return os.WriteFile(path, data, 0)
	}
	f, ok := o.files[key]
	if !ok {
		var err error
		if f, err = os.OpenFile(path, mode, 0); err != nil {
			return err
		}
		o.files[key] = f
	}
	_, err := f.WriteAt(data, 0)
	return err
}

// close closes every cached file.
func (o *openFiles) close() {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for p, f := range o.files {
		f.Close()
		delete(o.files, p)
	}
}

func (c cgroupFiles) dir(ctrl string) string {
	if c.v2 {
		return c.paths[""]
	}
	return c.paths[ctrl]
}

// keyed reads "key value" lines (memory.events, pids.events, cpu.stat,
// memory.oom_control) and returns the value of key.
func (c cgroupFiles) keyed(path, key string) (v uint64, ok bool) {
	_ = c.open.view(path, false, func(b []byte) { v, ok = keyedValue(b, key) })
	return v, ok
}

const asciiSpace = " \t\r\v\f"

// keyedValue finds the line "key value" in b (whitespace-separated, exactly
// two fields) and parses its value, without allocating.
func keyedValue(b []byte, key string) (uint64, bool) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		line = bytes.TrimSpace(line)
		i := bytes.IndexAny(line, asciiSpace)
		if i < 0 || string(line[:i]) != key {
			continue
		}
		val := bytes.TrimLeft(line[i:], asciiSpace)
		if bytes.ContainsAny(val, asciiSpace) {
			continue // more than two fields
		}
		return parseUint(val)
	}
	return 0, false
}

// parseUint parses a decimal counter without allocating.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		d := uint64(ch - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false // overflow
		}
		v = v*10 + d
	}
	return v, true
}

func (c cgroupFiles) single(path string) (v uint64, ok bool) {
	_ = c.open.view(path, false, func(b []byte) { v, ok = singleValue(b) })
	return v, ok
}

// singleValue parses a single-value counter file's content ("max": none).
func singleValue(b []byte) (uint64, bool) { return parseUint(bytes.TrimSpace(b)) }

func (c cgroupFiles) usage() Usage { return c.read(true) }

// read reads the counters; the memory figures only if withMemory.
func (c cgroupFiles) read(withMemory bool) Usage {
	var u Usage
	mem := c.dir("memory")
	if c.v2 {
		if v, ok := c.keyed(filepath.Join(mem, "cpu.stat"), "usage_usec"); ok {
			u.CPU = time.Duration(v) * time.Microsecond
		}
		if withMemory {
			var peak uint64
			ok := false
			_ = c.open.view(filepath.Join(mem, "memory.peak"), true, func(b []byte) { peak, ok = singleValue(b) })
			if ok {
				u.MemoryPeak = int64(peak)
			}
			if v, ok := c.single(filepath.Join(mem, "memory.current")); ok {
				u.MemoryCurrent = int64(v)
			}
		}
		u.OOMKills, _ = c.keyed(filepath.Join(mem, "memory.events"), "oom_kill")
		u.PidsDenied, _ = c.keyed(filepath.Join(mem, "pids.events"), "max")
		return u
	}
	if v, ok := c.single(filepath.Join(c.dir("cpuacct"), "cpuacct.usage")); ok {
		u.CPU = time.Duration(v)
	}
	if withMemory {
		if v, ok := c.single(filepath.Join(mem, "memory.max_usage_in_bytes")); ok {
			u.MemoryPeak = int64(v)
		}
		if v, ok := c.single(filepath.Join(mem, "memory.usage_in_bytes")); ok {
			u.MemoryCurrent = int64(v)
		}
	}
	u.OOMKills, _ = c.keyed(filepath.Join(mem, "memory.oom_control"), "oom_kill")
	u.PidsDenied, _ = c.keyed(filepath.Join(c.dir("pids"), "pids.events"), "max")
	return u
}

// resetPeak restarts the memory high-water mark, so that the peak usage
// reads next is the cell's own, and reports whether it could. v1 resets by
// writing to memory.max_usage_in_bytes. v2 resets memory.peak from Linux
// 6.12 on, for the one open file that was written to: that descriptor is
// kept and usage reads the peak through it. Before 6.12 the write fails
// and the peak stays the sandbox's lifetime peak.
func (c cgroupFiles) resetPeak() bool {
	if c.v2 {
		return c.open.write(filepath.Join(c.dir("memory"), "memory.peak"), []byte("reset\n"), true) == nil
	}
	return c.open.write(filepath.Join(c.dir("memory"), "memory.max_usage_in_bytes"), []byte("0"), false) == nil
}
