package criu

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

func TestUsernsImageRoundTrip(t *testing.T) {
	m := usernsMaps{uid: []idExtent{{0, 100000, 65536}}, gid: []idExtent{{0, 100000, 65536}}}
	got, err := decodeUserns(encodeUserns(m))
	if err != nil || len(got.uid) != 1 || got.uid[0] != m.uid[0] || len(got.gid) != 1 || got.gid[0] != m.gid[0] {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range [][]byte{{0x0a, 0x02, 0x08}, {0x08, 0x01}, {0x0a, 0x02, 0x08, 0x01}} {
		if _, err := decodeUserns(bad); err == nil {
			t.Errorf("decode(%x) accepted", bad)
		}
	}
}

// FuzzDecodeUserns: no input panics the userns entry decoder, and what it
// accepts encodes back to an entry that decodes the same.
func FuzzDecodeUserns(f *testing.F) {
	f.Add(encodeUserns(usernsMaps{uid: []idExtent{{0, 100000, 65536}}, gid: []idExtent{{0, 100000, 65536}}}))
	f.Add([]byte{0x0a, 0x02, 0x08})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeUserns(b)
		if err != nil {
			return
		}
		again, err := decodeUserns(encodeUserns(m))
		if err != nil || len(again.uid) != len(m.uid) || len(again.gid) != len(m.gid) {
			t.Fatalf("round trip: %+v -> %+v, %v", m, again, err)
		}
		for i := range m.uid {
			if again.uid[i] != m.uid[i] {
				t.Fatalf("uid extent %d: %+v -> %+v", i, m.uid[i], again.uid[i])
			}
		}
		for i := range m.gid {
			if again.gid[i] != m.gid[i] {
				t.Fatalf("gid extent %d: %+v -> %+v", i, m.gid[i], again.gid[i])
			}
		}
	})
}

// writeUserns writes a userns image of m into dir, as criu lays it out.
func writeUserns(t *testing.T, dir string, m usernsMaps) {
	t.Helper()
	entry := encodeUserns(m)
	b := make([]byte, 12, 12+len(entry))
	binary.LittleEndian.PutUint32(b, criuCommonMagic)
	binary.LittleEndian.PutUint32(b[4:], criuUsernsMagic)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(entry)))
	if err := os.WriteFile(filepath.Join(dir, "userns-1.img"), append(b, entry...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMoveUsernsRefusesAnotherSize: a checkpoint whose map is not one
// slot's size (an image from a store, edited) is not moved: moved as it
// was, its extent would reach into the next slots' host ids. A slot's is
// moved, keeping its size.
func TestMoveUsernsRefusesAnotherSize(t *testing.T) {
	const slot = 65536
	for _, count := range []uint32{slot * 4, 1<<32 - 1, slot - 1} {
		dir := t.TempDir()
		e := idExtent{0, 100000, count}
		writeUserns(t, dir, usernsMaps{uid: []idExtent{e}, gid: []idExtent{e}})
		if err := MoveUserns(dir, 200000, slot); err == nil {
			t.Errorf("a map of %d ids was moved to a slot of %d", count, slot)
		}
	}
	dir := t.TempDir()
	e := idExtent{0, 100000, slot}
	writeUserns(t, dir, usernsMaps{uid: []idExtent{e}, gid: []idExtent{e}})
	if err := MoveUserns(dir, 200000, slot); err != nil {
		t.Fatal(err)
	}
	m, err := readUsernsImage(filepath.Join(dir, "userns-1.img"))
	if err != nil || m.uid[0] != (idExtent{0, 200000, slot}) || m.gid[0] != m.uid[0] {
		t.Fatalf("moved: %+v %v", m, err)
	}
}
