package session

import (
	"sync"

	"github.com/jailcell/jailcell/internal/termtext"
)

// plainOutput is a cell's stdout and stderr cleaned as they stream (see
// ExecRequest.RawANSI): one termtext.Cleaner per stream, so a sequence
// split between two chunks is removed whole.
type plainOutput struct {
	mu   sync.Mutex
	next func(stream, text string)
	c    [2]termtext.Cleaner
}

func streamIndex(stream string) int {
	if stream == "stderr" {
		return 1
	}
	return 0
}

func (p *plainOutput) onOutput(stream, text string) {
	p.mu.Lock()
	out := p.c[streamIndex(stream)].Write(text)
	p.mu.Unlock()
	if out != "" {
		p.next(stream, out)
	}
}

// flush sends what each stream held back (a trailing "\r"); the cell has
// ended, so no chunk comes after it.
func (p *plainOutput) flush() {
	for i, stream := range [2]string{"stdout", "stderr"} {
		p.mu.Lock()
		out := p.c[i].Flush()
		p.mu.Unlock()
		if out != "" {
			p.next(stream, out)
		}
	}
}

// plainText cleans the text of a result that came from the sandbox:
// stdout, stderr, and the exception's message and traceback.
func plainText(res *Result) {
	res.Stdout = termtext.Clean(res.Stdout)
	res.Stderr = termtext.Clean(res.Stderr)
	if e := res.Error; e != nil {
		e.Message = termtext.Clean(e.Message)
		e.Traceback = termtext.Clean(e.Traceback)
	}
}
