package criu

import "testing"

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
