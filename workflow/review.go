package workflow

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ReviewFile is the review log's file in the review directory.
const ReviewFile = "review.jsonl"

// maxReviewLine bounds one review entry read back.
const maxReviewLine = 16 << 20

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
}

func (l *reviewLog) append(e ReviewEntry) error {
	if l.dir == "" {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return fmt.Errorf("create review dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(l.dir, ReviewFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open review log: %w", err)
	}
	defer f.Close()
	_, err = f.Write(append(b, '\n'))
	return err
}

func (r *Runner) review(req Request, out *Outcome, fp string) {
	e := ReviewEntry{
		Time: r.cfg.Now().UTC(), Session: req.Session, UID: req.Owner, Code: req.Exec.Code,
		Attempts: out.Attempts, Reason: out.Fallback.Reason, Fingerprint: fp,
	}
	for _, a := range out.Attempts {
		if a.Error != nil {
			e.Errors = append(e.Errors, a.Error.Type+": "+a.Error.Message)
		} else if a.Status != "ok" {
			e.Errors = append(e.Errors, "status "+a.Status)
		}
	}
	if len(out.Attempts) == 0 {
		e.Errors = append(e.Errors, out.Fallback.Error)
	}
	if err := r.rev.append(e); err != nil {
		r.cfg.Logger.Warn("append review log", "err", err)
	}
	r.cfg.Logger.Info("loop ended in failure", "session", req.Session, "uid", req.Owner, "reason", out.Fallback.Reason, "fingerprint", fp)
}

// ReadReview reads every entry of the review log in dir, oldest first.
func ReadReview(dir string) ([]ReviewEntry, error) {
	f, err := os.Open(filepath.Join(dir, ReviewFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open review log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxReviewLine)
	var out []ReviewEntry
	for n := 1; sc.Scan(); n++ {
		var e ReviewEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return out, fmt.Errorf("review log line %d: %w", n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
