package session

import "testing"

func TestHistogram(t *testing.T) {
	h := NewHistogram(0.1, 1, 10)
	for _, v := range []float64{0.05, 0.1, 0.3, 42} {
		h.Observe(v)
	}
	bounds, cum, sum, n := h.Snapshot()
	want := []uint64{2, 3, 3}
	for i := range bounds {
		if cum[i] != want[i] {
			t.Errorf("le=%g: %d, want %d", bounds[i], cum[i], want[i])
		}
	}
	if n != 4 || sum != 42.45 {
		t.Errorf("n=%d sum=%g", n, sum)
	}
}
