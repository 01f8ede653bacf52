package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// s3Store keeps objects in a bucket under a prefix, path-style addressed.
// One PUT is atomic on S3: an interrupted upload (single or multipart) is
// never visible under its key. The sha256 travels as user metadata
// (x-amz-meta-sha256), set before the body is sent.
type s3Store struct {
	c        *minio.Client
	bucket   string
	prefix   string // "" or ends with "/"
	endpoint string
	timeout  time.Duration
}

// metaSum is the user metadata key holding an object's sha256.
const metaSum = "Sha256"

func (s *s3Store) Name() string {
	return "s3://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/") + " at " + s.endpoint
}
func (s *s3Store) Shared() bool { return true }

// within bounds ctx for a request moving n bytes: the store's timeout, plus
// a second per MiB (1 MiB/s is the slowest store tolerated).
func (s *s3Store) within(ctx context.Context, n int64) (context.Context, context.CancelFunc) {
	return bound(ctx, s.timeout+time.Duration(n>>20)*time.Second)
}

// fail turns a client error into this package's sentinels.
func (s *s3Store) fail(key string, err error) error {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchKey":
		return fmt.Errorf("%w: %s in %s", ErrNotFound, key, s.Name())
	case "PreconditionFailed", "ConditionalRequestConflict":
		return fmt.Errorf("%w: %s in %s", ErrConflict, key, s.Name())
	}
	if resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket" {
		return fmt.Errorf("%w: %s in %s", ErrNotFound, key, s.Name())
	}
	if resp.StatusCode == http.StatusPreconditionFailed {
		return fmt.Errorf("%w: %s in %s", ErrConflict, key, s.Name())
	}
	return unavailable(s.Name(), fmt.Errorf("%s: %w", key, err))
}

func (s *s3Store) Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error) {
	if err := CheckKey(key); err != nil {
		return Object{}, err
	}
	rs, cleanup, err := seekable(r, size)
	if err != nil {
		return Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	defer cleanup()
	start, _ := rs.Seek(0, io.SeekCurrent)
	sum, err := sumOf(rs, size)
	if err != nil {
		return Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	if _, err := rs.Seek(start, io.SeekStart); err != nil {
		return Object{}, fmt.Errorf("put %s: %w", key, err)
	}
	ctx, cancel := s.within(ctx, size)
	defer cancel()
	_, err = s.c.PutObject(ctx, s.bucket, s.prefix+key, io.LimitReader(rs, size), size, minio.PutObjectOptions{
		UserMetadata: map[string]string{metaSum: sum}, ContentType: "application/octet-stream",
		DisableContentSha256: false,
	})
	if err != nil {
		return Object{}, s.fail(key, err)
	}
	return Object{Key: key, Size: size, SHA256: sum}, nil
}

// seekable is r if it can seek, else a temporary file holding size bytes
// of it.
func seekable(r io.Reader, size int64) (io.ReadSeeker, func(), error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		return rs, func() {}, nil
	}
	f, err := os.CreateTemp("", "jailcell-put-*")
	if err != nil {
		return nil, nil, err
	}
	_ = os.Remove(f.Name())
	if n, err := io.Copy(f, io.LimitReader(r, size+1)); err != nil || n != size {
		f.Close()
		if err == nil {
			err = fmt.Errorf("source has %d bytes, %d announced", n, size)
		}
		return nil, nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

func (s *s3Store) Get(ctx context.Context, key string, max int64) (io.ReadCloser, Object, error) {
	if err := CheckKey(key); err != nil {
		return nil, Object{}, err
	}
	// The bound covers the whole read; a reader left open is cancelled by
	// it too.
	ctx, cancel := s.within(ctx, max)
	core := minio.Core{Client: s.c}
	body, info, _, err := core.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		cancel()
		return nil, Object{}, s.fail(key, err)
	}
	sum := info.Metadata.Get("X-Amz-Meta-" + metaSum)
	obj := Object{Key: key, Size: info.Size, SHA256: sum}
	switch {
	case len(sum) != 64:
		body.Close()
		cancel()
		return nil, Object{}, fmt.Errorf("%w: %s in %s has no checksum", ErrCorrupt, key, s.Name())
	case info.Size < 0 || info.Size > max:
		body.Close()
		cancel()
		return nil, Object{}, fmt.Errorf("%w: %s in %s is %d bytes, more than the %d allowed", ErrTooLarge, key, s.Name(), info.Size, max)
	}
	return newVerifier(body, s.Name(), key, info.Size, sum, cancel), obj, nil
}

func (s *s3Store) List(ctx context.Context, prefix string, max int) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	ctx, cancel := s.within(ctx, 0)
	defer cancel()
	var objs []Object
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, s.fail(prefix, o.Err)
		}
		// A key from the store is checked like any input: it names objects
		// only, never a path on the host.
		key, ok := strings.CutPrefix(o.Key, s.prefix)
		if !ok || CheckKey(key) != nil || strings.HasSuffix(o.Key, "/") {
			continue
		}
		if len(objs) == max {
			return nil, fmt.Errorf("%w: more than %d objects under %q in %s", ErrTooLarge, max, prefix, s.Name())
		}
		objs = append(objs, Object{Key: key, Size: o.Size})
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailable(s.Name(), fmt.Errorf("list %q: %w", prefix, err))
	}
	return objs, nil
}

func (s *s3Store) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	ctx, cancel := s.within(ctx, 0)
	defer cancel()
	if err := s.c.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{}); err != nil {
		if err := s.fail(key, err); errors.Is(err, ErrNotFound) {
			return nil
		}
		return s.fail(key, err)
	}
	return nil
}

func (s *s3Store) Record(ctx context.Context, key string, max int64) ([]byte, string, error) {
	if err := CheckKey(key); err != nil {
		return nil, "", err
	}
	ctx, cancel := s.within(ctx, max)
	defer cancel()
	core := minio.Core{Client: s.c}
	body, info, _, err := core.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, "", s.fail(key, err)
	}
	sum := info.Metadata.Get("X-Amz-Meta-" + metaSum)
	if len(sum) != 64 {
		body.Close()
		return nil, "", fmt.Errorf("%w: %s in %s has no checksum", ErrCorrupt, key, s.Name())
	}
	if info.Size < 0 || info.Size > max {
		body.Close()
		return nil, "", fmt.Errorf("%w: %s in %s is %d bytes, more than the %d allowed", ErrTooLarge, key, s.Name(), info.Size, max)
	}
	v := newVerifier(body, s.Name(), key, info.Size, sum, nil)
	defer v.Close()
	b, err := readAll(v, make([]byte, 0, info.Size))
	if err != nil {
		return nil, "", err
	}
	return b, info.ETag, nil
}

func (s *s3Store) Swap(ctx context.Context, key, old string, data []byte) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	sum, _ := sumOf(strings.NewReader(string(data)), int64(len(data)))
	opts := minio.PutObjectOptions{UserMetadata: map[string]string{metaSum: sum}, ContentType: "application/json"}
	if old == "" {
		opts.SetMatchETagExcept("*") // If-None-Match: *
	} else {
		opts.SetMatchETag(old) // If-Match
	}
	ctx, cancel := s.within(ctx, int64(len(data)))
	defer cancel()
	info, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, strings.NewReader(string(data)), int64(len(data)), opts)
	if err != nil {
		return "", s.fail(key, err)
	}
	return info.ETag, nil
}

// s3Transport bounds each phase of a request: a store that accepts
// connections and then says nothing is down.
func s3Transport(timeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   min(timeout, 10*time.Second),
		ResponseHeaderTimeout: timeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
	}
}
