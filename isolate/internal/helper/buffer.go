package helper

import "bytes"

// BoundedBuffer keeps at most Max bytes and remembers that it was offered
// more.
type BoundedBuffer struct {
	bytes.Buffer
	Max  int
	Over bool
}

func (b *BoundedBuffer) Write(p []byte) (int, error) {
	if room := b.Max - b.Len(); len(p) > room {
		b.Over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
