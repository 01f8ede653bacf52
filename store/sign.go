package store

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/jailcell/jailcell/internal/secretfile"
)

// Signed store objects. A shared store can be written by anyone holding
// its credentials (or root on the box that serves it): a checksum proves
// nothing then, since an attacker recomputes it. So every object and
// record a node writes carries an HMAC-SHA256 under a fleet key the store
// never holds, over DSSE's pre-authentication encoding (PAE) of a
// statement naming the object's key, size, sha256 and this format's
// version: an object cannot be edited, nor replayed under another key
// (another owner's uid=N/ prefix, another session's hibernated/<id>/),
// without the key. What it cannot stop: a holder of the key (any node),
// and a rollback to an older object signed for the same key.
//
// On the wire each object is a fixed header followed by the body:
//
//	magic (8) | key name (32, NUL padded) | body size (8, big endian) |
//	body sha256 (32) | HMAC-SHA256 (32)
//
// The header is checked before a byte of the body is handed out; the
// body's sha256 at its EOF, as the store's own verifier does.

// ErrUnsigned: an object read back carries no signature, or one that the
// configured fleet key (store.key_file) did not make.
var ErrUnsigned = errors.New("store object not signed by the fleet key")

const (
	sigMagic   = "jcsig\x00v1"
	sigNameLen = 32
	// SigHeaderLen is the size of the signature header in front of every
	// signed object.
	SigHeaderLen = len(sigMagic) + sigNameLen + 8 + sha256.Size + sha256.Size
	// sigPayloadType is the DSSE payloadType of what is signed.
	sigPayloadType = "application/vnd.jailcell.store-object+json"
	// sigVersion is the version inside the signed statement.
	sigVersion = 1
	// MaxKeyFile bounds a key file read.
	MaxKeyFile = 64 << 10
	// maxKeys bounds the keys of one key file.
	maxKeys = 16
	// minKeyBytes is the shortest secret accepted (HMAC-SHA256's block
	// of security).
	minKeyBytes = 32
	maxKeyBytes = 64
)

var keyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$`)

// Keyring is a fleet's store keys: the first signs, every one verifies,
// so a key is rotated by adding the new one first and keeping the old one
// until nothing signed with it is left.
type Keyring struct {
	names   []string
	secrets map[string][]byte
}

// Signer is the name of the key new objects are signed with.
func (k *Keyring) Signer() string { return k.names[0] }

// Names are the keys' names, the signer first.
func (k *Keyring) Names() []string { return append([]string(nil), k.names...) }

// NewKeyring makes a keyring of name/secret pairs, the signer first.
func NewKeyring(pairs ...[2]string) (*Keyring, error) {
	var b strings.Builder
	for _, p := range pairs {
		b.WriteString(p[0] + " " + base64.StdEncoding.EncodeToString([]byte(p[1])) + "\n")
	}
	return ParseKeyring("keyring", []byte(b.String()))
}

// ParseKeyring reads a key file: "NAME SECRET" lines, SECRET the standard
// base64 of 32 to 64 random bytes (e.g. `openssl rand -base64 32`), NAME
// 1-32 of [A-Za-z0-9._-]; # starts a comment. The first key signs. Errors
// name the line, never a secret.
func ParseKeyring(path string, b []byte) (*Keyring, error) {
	if len(b) > MaxKeyFile {
		return nil, fmt.Errorf("store.key_file %s: over the %d-byte limit", path, MaxKeyFile)
	}
	k := &Keyring{secrets: map[string][]byte{}}
	for i, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("store.key_file %s line %d: want NAME SECRET (SECRET the base64 of 32 to 64 random bytes), got %d fields", path, i+1, len(fields))
		}
		if !keyNameRE.MatchString(fields[0]) {
			return nil, fmt.Errorf("store.key_file %s line %d: a key name must be 1-32 of [A-Za-z0-9._-], not starting with . _ or -", path, i+1)
		}
		secret, err := base64.StdEncoding.DecodeString(fields[1])
		if err != nil || len(secret) < minKeyBytes || len(secret) > maxKeyBytes {
			return nil, fmt.Errorf("store.key_file %s line %d: key %q: the secret must be the standard base64 of %d to %d random bytes (openssl rand -base64 32)", path, i+1, fields[0], minKeyBytes, maxKeyBytes)
		}
		if _, dup := k.secrets[fields[0]]; dup {
			return nil, fmt.Errorf("store.key_file %s line %d: key %q listed twice", path, i+1, fields[0])
		}
		for _, n := range k.names {
			if hmac.Equal(k.secrets[n], secret) {
				return nil, fmt.Errorf("store.key_file %s line %d: key %q has the secret of key %q", path, i+1, fields[0], n)
			}
		}
		if len(k.names) == maxKeys {
			return nil, fmt.Errorf("store.key_file %s line %d: more than %d keys", path, i+1, maxKeys)
		}
		k.names = append(k.names, fields[0])
		k.secrets[fields[0]] = secret
	}
	if len(k.names) == 0 {
		return nil, fmt.Errorf("store.key_file %s: no keys; want NAME SECRET lines, the signing key first", path)
	}
	return k, nil
}

// LoadKeyring reads the key file at path. It holds the fleet's secret, so
// a file anyone but this daemon's user could replace or others could read
// is refused, not used: it must be a regular file owned by the daemon's
// user, mode 0600, 0400, 0640 or 0440.
func LoadKeyring(path string) (*Keyring, error) {
	b, err := secretfile.Read("store.key_file", path, MaxKeyFile, true)
	if err != nil {
		return nil, err
	}
	return ParseKeyring(path, b)
}

// pae is DSSE's pre-authentication encoding of (typ, body):
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
func pae(typ string, body []byte) []byte {
	var b bytes.Buffer
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(typ)))
	b.WriteByte(' ')
	b.WriteString(typ)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(body)))
	b.WriteByte(' ')
	b.Write(body)
	return b.Bytes()
}

// statement is what is signed for one object.
type statement struct {
	Version int    `json:"v"`
	Kind    string `json:"kind"` // object (Put) or record (Swap)
	Key     string `json:"key"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
}

const (
	kindObject = "object"
	kindRecord = "record"
)

func (k *Keyring) mac(name, kind, key string, size int64, sum []byte) []byte {
	st, _ := json.Marshal(statement{Version: sigVersion, Kind: kind, Key: key, Size: size, SHA256: hex.EncodeToString(sum)})
	h := hmac.New(sha256.New, k.secrets[name])
	h.Write(pae(sigPayloadType, st))
	return h.Sum(nil)
}

// sigHeader is a decoded signature header.
type sigHeader struct {
	name string
	size int64
	sum  []byte
	mac  []byte
}

// header builds the signature header of a body of size bytes with sha256
// sum, stored under key.
func (k *Keyring) header(kind, key string, size int64, sum []byte) []byte {
	name := k.Signer()
	b := make([]byte, 0, SigHeaderLen)
	b = append(b, sigMagic...)
	b = append(b, name...)
	b = append(b, make([]byte, sigNameLen-len(name))...)
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	b = append(b, sum...)
	return append(b, k.mac(name, kind, key, size, sum)...)
}

// decodeSigHeader parses a header; it checks its shape only, not its MAC.
func decodeSigHeader(b []byte) (sigHeader, error) {
	if len(b) != SigHeaderLen || string(b[:len(sigMagic)]) != sigMagic {
		return sigHeader{}, errors.New("no jailcell signature header")
	}
	b = b[len(sigMagic):]
	name := string(bytes.TrimRight(b[:sigNameLen], "\x00"))
	if !keyNameRE.MatchString(name) || bytes.IndexByte(b[:sigNameLen][:len(name)], 0) >= 0 {
		return sigHeader{}, errors.New("a signature header with a malformed key name")
	}
	b = b[sigNameLen:]
	size := binary.BigEndian.Uint64(b[:8])
	if size > 1<<62 {
		return sigHeader{}, errors.New("a signature header with an impossible size")
	}
	b = b[8:]
	return sigHeader{name: name, size: int64(size), sum: b[:sha256.Size], mac: b[sha256.Size:]}, nil
}

// verify checks h, read from key of kind in store, against the keyring.
func (k *Keyring) verify(h sigHeader, kind, key, store string) error {
	if _, ok := k.secrets[h.name]; !ok {
		return fmt.Errorf("%w: %s in %s is signed with key %q, not one of store.key_file's (%s)", ErrUnsigned, key, store, h.name, strings.Join(k.names, ", "))
	}
	if !hmac.Equal(h.mac, k.mac(h.name, kind, key, h.size, h.sum)) {
		return fmt.Errorf("%w: %s in %s: its signature (key %q) does not match: changed, or copied from another key, owner or session", ErrUnsigned, key, store, h.name)
	}
	return nil
}

// Sign wraps s: every Put and Swap is signed with keys' signer, every Get
// and Record verified against keys before anything of it is returned.
// The wrapped store's own checksums stay as they are underneath.
func Sign(s Store, keys *Keyring) Store { return &signedStore{s: s, keys: keys} }

// Signer is the name of the key s signs with, if s is a signed store.
func Signer(s Store) (string, bool) {
	for {
		switch x := s.(type) {
		case *signedStore:
			return x.keys.Signer(), true
		case interface{ Unwrap() Store }:
			s = x.Unwrap()
		default:
			return "", false
		}
	}
}

// signedStore deliberately has no Unwrap: nothing reaches around it to
// the bytes underneath (LocalDir finds no directory, so session persists
// workspaces through it too).
type signedStore struct {
	s    Store
	keys *Keyring
}

func (g *signedStore) Name() string { return g.s.Name() }
func (g *signedStore) Shared() bool { return g.s.Shared() }

func (g *signedStore) Put(ctx context.Context, key string, r io.Reader, size int64) (Object, error) {
	if err := CheckKey(key); err != nil {
		return Object{}, err
	}
	if size < 0 {
		return Object{}, fmt.Errorf("put %s: size %d", key, size)
	}
	// The header goes first, and it holds the body's sha256: hash, then
	// rewind (a non-seeker is buffered in a temporary file first, as the
	// S3 store does).
	rs, cleanup, err := seekable(r, size)
	if err != nil {
		return Object{}, unavailable(g.Name(), fmt.Errorf("put %s: %w", key, err))
	}
	defer cleanup()
	start, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return Object{}, unavailable(g.Name(), fmt.Errorf("put %s: %w", key, err))
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(rs, size+1))
	if err == nil && n != size {
		err = fmt.Errorf("source has %d bytes, %d announced", n, size)
	}
	if err != nil {
		return Object{}, unavailable(g.Name(), fmt.Errorf("put %s: %w", key, err))
	}
	sum := h.Sum(nil)
	if _, err := rs.Seek(start, io.SeekStart); err != nil {
		return Object{}, unavailable(g.Name(), fmt.Errorf("put %s: %w", key, err))
	}
	body := &prefixed{head: g.keys.header(kindObject, key, size, sum), body: rs, start: start, size: size}
	if _, err := g.s.Put(ctx, key, body, int64(SigHeaderLen)+size); err != nil {
		return Object{}, err
	}
	return Object{Key: key, Size: size, SHA256: hex.EncodeToString(sum)}, nil
}

func (g *signedStore) Get(ctx context.Context, key string, max int64) (io.ReadCloser, Object, error) {
	if err := CheckKey(key); err != nil {
		return nil, Object{}, err
	}
	if max < 0 {
		max = 0
	}
	rc, obj, err := g.s.Get(ctx, key, max+int64(SigHeaderLen))
	if err != nil {
		return nil, Object{}, err
	}
	h, err := g.open(rc, obj, kindObject, key)
	if err != nil {
		rc.Close()
		return nil, Object{}, err
	}
	// The body's sha256 is the signed one, checked at its EOF (the store
	// underneath checks the whole object's too).
	return newVerifier(rc, g.Name(), key, h.size, hex.EncodeToString(h.sum), nil),
		Object{Key: key, Size: h.size, SHA256: hex.EncodeToString(h.sum)}, nil
}

// open reads and verifies the signature header at the start of r, an
// object of obj.Size bytes.
func (g *signedStore) open(r io.Reader, obj Object, kind, key string) (sigHeader, error) {
	if obj.Size < int64(SigHeaderLen) {
		return sigHeader{}, fmt.Errorf("%w: %s in %s: %d bytes, too short to carry a signature (written without store.key_file?)", ErrUnsigned, key, g.Name(), obj.Size)
	}
	buf := make([]byte, SigHeaderLen)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: %s in %s: ends inside its signature header", ErrCorrupt, key, g.Name())
		}
		return sigHeader{}, unavailable(g.Name(), err)
	}
	h, err := decodeSigHeader(buf)
	if err != nil {
		return sigHeader{}, fmt.Errorf("%w: %s in %s: %v (written without store.key_file?)", ErrUnsigned, key, g.Name(), err)
	}
	if err := g.keys.verify(h, kind, key, g.Name()); err != nil {
		return sigHeader{}, err
	}
	if h.size != obj.Size-int64(SigHeaderLen) {
		return sigHeader{}, fmt.Errorf("%w: %s in %s: %d bytes after its signature, signed for %d", ErrCorrupt, key, g.Name(), obj.Size-int64(SigHeaderLen), h.size)
	}
	return h, nil
}

func (g *signedStore) List(ctx context.Context, prefix string, max int) ([]Object, error) {
	objs, err := g.s.List(ctx, prefix, max)
	for i := range objs {
		objs[i].Size = max64(0, objs[i].Size-int64(SigHeaderLen))
	}
	return objs, err
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func (g *signedStore) Delete(ctx context.Context, key string) error { return g.s.Delete(ctx, key) }

func (g *signedStore) Record(ctx context.Context, key string, max int64) ([]byte, string, error) {
	if err := CheckKey(key); err != nil {
		return nil, "", err
	}
	b, ver, err := g.s.Record(ctx, key, max+int64(SigHeaderLen))
	if err != nil {
		return nil, "", err
	}
	r := bytes.NewReader(b)
	h, err := g.open(r, Object{Key: key, Size: int64(len(b))}, kindRecord, key)
	if err != nil {
		return nil, "", err
	}
	data := b[SigHeaderLen:]
	if sum := sha256.Sum256(data); !hmac.Equal(sum[:], h.sum) {
		return nil, "", fmt.Errorf("%w: record %s in %s: sha256 %x, signed %x", ErrCorrupt, key, g.Name(), sum, h.sum)
	}
	return data, ver, nil
}

func (g *signedStore) Swap(ctx context.Context, key, old string, data []byte) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	b := append(g.keys.header(kindRecord, key, int64(len(data)), sum[:]), data...)
	return g.s.Swap(ctx, key, old, b)
}

// prefixed reads head, then size bytes of body from start; it seeks, so
// a store that reads its source twice (S3: checksum, then upload) need
// not copy it.
type prefixed struct {
	head  []byte
	body  io.ReadSeeker
	start int64
	size  int64
	off   int64 // position in head+body
}

func (p *prefixed) Read(b []byte) (int, error) {
	if p.off < int64(len(p.head)) {
		n := copy(b, p.head[p.off:])
		p.off += int64(n)
		return n, nil
	}
	rest := int64(len(p.head)) + p.size - p.off
	if rest <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > rest {
		b = b[:rest]
	}
	n, err := p.body.Read(b)
	p.off += int64(n)
	if err == io.EOF && p.off < int64(len(p.head))+p.size {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (p *prefixed) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += p.off
	case io.SeekEnd:
		off += int64(len(p.head)) + p.size
	default:
		return 0, fmt.Errorf("seek: whence %d", whence)
	}
	if off < 0 || off > int64(len(p.head))+p.size {
		return 0, fmt.Errorf("seek to %d: outside the object", off)
	}
	body := max64(0, off-int64(len(p.head)))
	if _, err := p.body.Seek(p.start+body, io.SeekStart); err != nil {
		return 0, err
	}
	p.off = off
	return off, nil
}
