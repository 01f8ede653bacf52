package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The daemon's own small records in the state dir (the closed sessions,
// the lost ones) are written whole and read bounded.

// writeStateFile replaces path with b: a new file, synced, renamed over
// the old one, so a crash leaves one or the other, whole.
func writeStateFile(path string, b []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a rename: nothing
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// errStateFileTooLarge: a record is longer than its writer ever makes it.
var errStateFileTooLarge = errors.New("larger than this daemon writes it")

// readStateFile reads path, at most max bytes (os.ErrNotExist when there
// is none).
func readStateFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", errStateFileTooLarge, max)
	}
	return b, nil
}
