package criu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protowire"
)

// criu restores a sandbox's user namespace with the uid and gid maps it
// dumped (userns-N.img). A checkpoint restored on another disk (a fork, or
// a disk rebuilt after a reboot) has another uid slot: its maps are moved to
// the new slot here, so the restored processes own the new disk's files and
// no process ever runs under another sandbox's host ids.
//
// The image: two little-endian uint32 magics (common, userns), then one
// entry: a uint32 length and a protobuf userns_entry
// {repeated uid_gid_extent uid_map = 1; repeated uid_gid_extent gid_map = 2}
// with uid_gid_extent {uint32 first = 1; uint32 lower_first = 2;
// uint32 count = 3}. criu/images/userns.proto.

const (
	criuCommonMagic = 0x54564319
	criuUsernsMagic = 0x55474906
)

// idExtent is one line of a uid or gid map.
type idExtent struct{ first, lowerFirst, count uint32 }

// usernsMaps is a decoded userns entry.
type usernsMaps struct{ uid, gid []idExtent }

// maxUsernsImage bounds what is read: a real entry is a few dozen bytes.
const maxUsernsImage = 64 << 10

func readUsernsImage(path string) (usernsMaps, error) {
	var m usernsMaps
	// Bounded before it is read: the image may come from a store.
	f, err := os.Open(path)
	if err != nil {
		return m, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxUsernsImage+1))
	if err != nil {
		return m, err
	}
	if len(b) > maxUsernsImage || len(b) < 12 {
		return m, fmt.Errorf("userns image %s: %d bytes", path, len(b))
	}
	if binary.LittleEndian.Uint32(b) != criuCommonMagic || binary.LittleEndian.Uint32(b[4:]) != criuUsernsMagic {
		return m, fmt.Errorf("userns image %s: bad magic", path)
	}
	n := binary.LittleEndian.Uint32(b[8:])
	if int(n) != len(b)-12 {
		return m, fmt.Errorf("userns image %s: entry of %d bytes in %d", path, n, len(b)-12)
	}
	return decodeUserns(b[12:])
}

func decodeUserns(b []byte) (usernsMaps, error) {
	var m usernsMaps
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return m, protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != 1 && num != 2) {
			return m, fmt.Errorf("userns entry: unexpected field %d type %d", num, typ)
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return m, protowire.ParseError(n)
		}
		b = b[n:]
		e, err := decodeExtent(v)
		if err != nil {
			return m, err
		}
		if num == 1 {
			m.uid = append(m.uid, e)
		} else {
			m.gid = append(m.gid, e)
		}
	}
	return m, nil
}

func decodeExtent(b []byte) (idExtent, error) {
	var e idExtent
	var seen int
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.VarintType || num < 1 || num > 3 {
			return e, fmt.Errorf("uid_gid_extent: unexpected field %d type %d", num, typ)
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return e, protowire.ParseError(n)
		}
		b = b[n:]
		if v > 1<<32-1 {
			return e, fmt.Errorf("uid_gid_extent: field %d out of range", num)
		}
		switch num {
		case 1:
			e.first = uint32(v)
		case 2:
			e.lowerFirst = uint32(v)
		case 3:
			e.count = uint32(v)
		}
		seen |= 1 << num
	}
	if seen != 0b1110 {
		return e, errors.New("uid_gid_extent: a required field is missing")
	}
	return e, nil
}

func encodeUserns(m usernsMaps) []byte {
	var b []byte
	for i, list := range [][]idExtent{m.uid, m.gid} {
		for _, e := range list {
			var x []byte
			x = protowire.AppendTag(x, 1, protowire.VarintType)
			x = protowire.AppendVarint(x, uint64(e.first))
			x = protowire.AppendTag(x, 2, protowire.VarintType)
			x = protowire.AppendVarint(x, uint64(e.lowerFirst))
			x = protowire.AppendTag(x, 3, protowire.VarintType)
			x = protowire.AppendVarint(x, uint64(e.count))
			b = protowire.AppendTag(b, protowire.Number(i+1), protowire.BytesType)
			b = protowire.AppendBytes(b, x)
		}
	}
	return b
}

// imageHostID is the host id the checkpoint in imageDir mapped root to: the
// lower end of its one-extent uid map of size ids, as every sandbox is
// built. An extent of another size is refused: moved to this disk's slot
// as it was, it would map the sandbox's ids onto another slot's.
func imageHostID(imageDir string, size uint32) (int, error) {
	paths, err := filepath.Glob(filepath.Join(imageDir, "userns-*.img"))
	if err != nil || len(paths) != 1 {
		return 0, fmt.Errorf("checkpoint in %s: want one user namespace image, have %d", imageDir, len(paths))
	}
	m, err := readUsernsImage(paths[0])
	if err != nil {
		return 0, err
	}
	if len(m.uid) != 1 || m.uid[0].first != 0 || m.uid[0].count != size || len(m.gid) != 1 || m.gid[0] != m.uid[0] {
		return 0, fmt.Errorf("checkpoint in %s: user namespace maps %+v are not a sandbox's", imageDir, m)
	}
	return int(m.uid[0].lowerFirst), nil
}

// MoveUserns rewrites the checkpoint's user namespace maps to put root at
// hostID; their size must be size, a slot's. The sandbox's own ids inside
// do not change.
func MoveUserns(imageDir string, hostID int, size uint32) error {
	from, err := imageHostID(imageDir, size)
	if err != nil || from == hostID {
		return err
	}
	paths, _ := filepath.Glob(filepath.Join(imageDir, "userns-*.img"))
	m, err := readUsernsImage(paths[0])
	if err != nil {
		return err
	}
	m.uid[0].lowerFirst = uint32(hostID)
	m.gid[0].lowerFirst = uint32(hostID)
	entry := encodeUserns(m)
	b := make([]byte, 12, 12+len(entry))
	binary.LittleEndian.PutUint32(b, criuCommonMagic)
	binary.LittleEndian.PutUint32(b[4:], criuUsernsMagic)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(entry)))
	b = append(b, entry...)
	tmp := paths[0] + ".tmp"
	if err := os.WriteFile(tmp, b, ImageFileMode); err != nil {
		return fmt.Errorf("rewrite user namespace image: %w", err)
	}
	if err := os.Rename(tmp, paths[0]); err != nil {
		return fmt.Errorf("rewrite user namespace image: %w", err)
	}
	return nil
}
