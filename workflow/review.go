package workflow

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// ReviewFile is the review log's file in the review directory. Past
// maxReviewLog bytes it is renamed to ReviewFile+".1", replacing the one
// before.
const ReviewFile = "review.jsonl"

const (
	// maxReviewLine bounds one review entry read back; a longer line is
	// skipped, never the end of the listing.
	maxReviewLine = 16 << 20
	// maxReviewLog is the size past which the review log is rotated: a
	// caller whose every request is refused cannot fill the disk.
	maxReviewLog = 64 << 20
	// maxReviewCode bounds the code an entry keeps, and each attempt's;
	// a cut code ends with a note carrying the whole code's sha256.
	maxReviewCode = 64 << 10
	// maxReviewText bounds each error text and the reason an entry keeps,
	// maxReviewType an error's type. With the codes and the 20 attempts a
	// loop may have, an entry stays under 2.5 MiB of text: under
	// maxReviewLine even if JSON escapes every byte in six.
	maxReviewText = 16 << 10
	maxReviewType = 1 << 10
)

// ReviewEntry is one loop-ending failure, for an administrator.
type ReviewEntry struct {
	Time        time.Time `json:"time"`
	Session     string    `json:"session,omitempty"`
	UID         int       `json:"uid"`
	Code        string    `json:"code"`
	Errors      []string  `json:"errors"`
	Attempts    []Attempt `json:"attempts"`
	Reason      string    `json:"reason"`
	Fingerprint string    `json:"fingerprint,omitempty"`
}

type reviewLog struct {
	mu  sync.Mutex
	dir string
	max int64 // rotation bound; 0: maxReviewLog
}

// checkReviewDir makes dir and refuses it unless it is a directory of the
// effective user's that no one else can write: whoever can write it can
// plant a symlink where jailcell writes, as root, its log or failure memory.
func checkReviewDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create review dir %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("check review dir %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.IsDir() || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		uid := -1
		if ok {
			uid = int(st.Uid)
		}
		return fmt.Errorf("review dir %s (review.dir) is owned by uid %d with mode %s: want a directory owned by uid %d, not writable by group or others",
			dir, uid, fi.Mode(), os.Geteuid())
	}
	return nil
}

// openAppend opens the review log to append, never through a symlink.
func openAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open review log: %w", err)
	}
	return f, nil
}

func (l *reviewLog) append(e ReviewEntry) error {
	if l.dir == "" {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if len(b) >= maxReviewLine { // beyond the bounds above; kept readable all the same
		e.Attempts, e.Reason = nil, cut(e.Reason, maxReviewText)+" [attempts dropped: entry over the line bound]"
		if b, err = json.Marshal(e); err != nil {
			return err
		}
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := checkReviewDir(l.dir); err != nil {
		return err
	}
	path := filepath.Join(l.dir, ReviewFile)
	f, err := openAppend(path)
	if err != nil {
		return err
	}
	max := l.max
	if max == 0 {
		max = maxReviewLog
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 && fi.Size()+int64(len(b)) > max {
		f.Close()
		if err := os.Rename(path, path+".1"); err != nil {
			return fmt.Errorf("rotate review log: %w", err)
		}
		if f, err = openAppend(path); err != nil {
			return err
		}
	}
	defer f.Close()
	_, err = f.Write(b)
	return err
}

// head is the first n bytes of s at most, ending on a rune boundary.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cut keeps the first n bytes of s, marked when cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return head(s, n) + "...[cut]"
}

// cutCode keeps the first n bytes of code; a cut one ends with a comment
// naming the whole code's size and sha256.
func cutCode(code string, n int) string {
	if len(code) <= n {
		return code
	}
	return fmt.Sprintf("%s\n# [cut by jailcell: the whole code is %d bytes, sha256 %x]", head(code, n), len(code), sha256.Sum256([]byte(code)))
}

// reviewAttempt is a's bounded copy for the review log.
func reviewAttempt(a Attempt) Attempt {
	a.Code = cutCode(a.Code, maxReviewCode)
	if a.Error != nil {
		e := *a.Error
		e.Type, e.Message, e.Traceback = cut(e.Type, maxReviewType), cut(e.Message, maxReviewText), trim(e.Traceback, maxReviewText)
		e.Frames = nil // the traceback names them
		a.Error = &e
	}
	return a
}

func (r *Runner) review(req Request, out *Outcome, fp string) {
	e := ReviewEntry{
		Time: r.cfg.Now().UTC(), Session: req.Session, UID: req.Owner, Code: cutCode(req.Exec.Code, maxReviewCode),
		Reason: cut(out.Fallback.Reason, maxReviewText), Fingerprint: fp,
	}
	for _, a := range out.Attempts {
		e.Attempts = append(e.Attempts, reviewAttempt(a))
		if a.Error != nil {
			e.Errors = append(e.Errors, cut(a.Error.Type+": "+a.Error.Message, maxReviewText))
		} else if a.Status != "ok" {
			e.Errors = append(e.Errors, "status "+a.Status)
		}
	}
	if len(out.Attempts) == 0 {
		e.Errors = append(e.Errors, cut(out.Fallback.Error, maxReviewText))
	}
	if err := r.rev.append(e); err != nil {
		r.cfg.Logger.Warn("append review log", "err", err)
	}
	r.cfg.Logger.Info("loop ended in failure", "session", req.Session, "uid", req.Owner, "reason", out.Fallback.Reason, "fingerprint", fp)
}

// ReadReview reads every entry of the review log in dir, oldest first:
// the rotated file, then the current one. A line over maxReviewLine or
// not an entry is listed as an entry whose reason says so.
func ReadReview(dir string) ([]ReviewEntry, error) {
	var out []ReviewEntry
	for _, name := range []string{ReviewFile + ".1", ReviewFile} {
		var err error
		if out, err = readReviewFile(filepath.Join(dir, name), out); err != nil {
			return out, err
		}
	}
	return out, nil
}

func readReviewFile(path string, out []ReviewEntry) ([]ReviewEntry, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("open review log: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		line, long, err := readLine(br, maxReviewLine)
		if err != nil && err != io.EOF {
			return out, fmt.Errorf("read review log %s: %w", path, err)
		}
		if long {
			out = append(out, ReviewEntry{Reason: fmt.Sprintf("(%s line %d skipped: over %d bytes)", filepath.Base(path), n, maxReviewLine)})
		} else if len(bytes.TrimSpace(line)) > 0 {
			var e ReviewEntry
			if derr := json.Unmarshal(line, &e); derr != nil {
				e = ReviewEntry{Reason: fmt.Sprintf("(%s line %d skipped: %v)", filepath.Base(path), n, derr)}
			}
			out = append(out, e)
		}
		if err == io.EOF {
			return out, nil
		}
	}
}

// readLine reads one line of at most max bytes; a longer one is read to
// its end but not kept, and reported long.
func readLine(br *bufio.Reader, max int) (line []byte, long bool, err error) {
	for {
		chunk, rerr := br.ReadSlice('\n')
		if !long {
			if len(line)+len(chunk) > max+1 {
				line, long = nil, true
			} else {
				line = append(line, chunk...)
			}
		}
		if rerr != bufio.ErrBufferFull {
			return bytes.TrimSuffix(line, []byte("\n")), long, rerr
		}
	}
}
