package isolate

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// read returns the content of path (at most 4 KiB: counter files are small).
func (o *openFiles) read(path string) ([]byte, error) {
	if o == nil {
		return os.ReadFile(path)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return os.ReadFile(path)
	}
	f, ok := o.files[path]
	if !ok {
		var err error
		if f, err = os.Open(path); err != nil {
			return nil, err
		}
		o.files[path] = f
	}
	n, err := f.ReadAt(o.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return append([]byte(nil), o.buf[:n]...), nil
}

// readWritten reads path through the read-write descriptor write(path,
// ..., true) opened, if there is one: reading memory.peak through the fd
// that reset it gives the peak since that reset (Linux >= 6.12); any
// other fd gives the lifetime peak.
func (o *openFiles) readWritten(path string) ([]byte, error) {
	if o == nil {
		return os.ReadFile(path)
	}
	o.mu.Lock()
	f, ok := o.files["rw:"+path]
	if !ok || o.closed {
		o.mu.Unlock()
		return o.read(path)
	}
	defer o.mu.Unlock()
	n, err := f.ReadAt(o.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return append([]byte(nil), o.buf[:n]...), nil
}

// write writes data to path through a cached write-only descriptor.
// With readBack the descriptor is opened read-write and kept for
// readWritten; without a cache (nil or closed), readBack fails, since the
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
func (c cgroupFiles) keyed(path, key string) (uint64, bool) {
	b, err := c.open.read(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == key {
			v, err := strconv.ParseUint(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func (c cgroupFiles) single(path string) (uint64, bool) { return c.parse(c.open.read(path)) }

// parse reads a single-value counter file's content.
func (c cgroupFiles) parse(b []byte, err error) (uint64, bool) {
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

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
			if v, ok := c.parse(c.open.readWritten(filepath.Join(mem, "memory.peak"))); ok {
				u.MemoryPeak = int64(v)
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
