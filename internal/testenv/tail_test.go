package testenv

import "testing"

func TestLockedBufferTail(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\n", 3, "a\nb\n"},
		{"a\nb\nc\nd\n", 2, "[2 earlier lines left out]\nc\nd\n"},
		{"a\nb\nc", 1, "[2 earlier lines left out]\nc"},
	} {
		var b LockedBuffer
		b.Write([]byte(tc.in))
		if got := b.Tail(tc.n); got != tc.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
