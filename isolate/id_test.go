package isolate

import (
	"regexp"
	"strings"
	"testing"
)

// TestValidID: validID accepts exactly what the regexp it replaced did.
func TestValidID(t *testing.T) {
	ref := regexp.MustCompile(`^[A-Za-z0-9_]{1,48}$`)
	cases := []string{"", "a", "A_9", "sess_1-2", "a b", "a/b", "../x", "é", "a\n", "\x00",
		strings.Repeat("x", 47), strings.Repeat("x", 48), strings.Repeat("x", 49), "Z" + strings.Repeat("_", 47)}
	for c := 0; c < 256; c++ {
		cases = append(cases, "a"+string(rune(c)), string([]byte{byte(c)}))
	}
	for _, id := range cases {
		if got, want := validID(id), ref.MatchString(id); got != want {
			t.Errorf("validID(%q) = %v, want %v", id, got, want)
		}
	}
}
