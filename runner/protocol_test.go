package runner

import "testing"

// TestReceivedType: a frame's "t" names a kernel frame type however it is
// escaped, and nothing else does: not a host->kernel type, not another
// JSON type, not a prefix.
func TestReceivedType(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want frameType
	}{
		{`"stream"`, frameStream},
		{`"\u0073tream"`, frameStream},
		{`"start\u0065d"`, frameStarted},
		{`"result"`, frameResult},
		{`"hello"`, frameHello},
		{`"assist"`, frameAssist},
		{`"exec"`, ""},
		{`"ping"`, ""},
		{`"\u0065xec"`, ""},
		{`"stream "`, ""},
		{`"strea"`, ""},
		{`""`, ""},
		{`1`, ""},
		{`null`, ""},
		{`["stream"]`, ""},
		{``, ""},
	} {
		if got := receivedType([]byte(tc.raw)); got != tc.want {
			t.Errorf("receivedType(%s) = %q, want %q", tc.raw, got, tc.want)
		}
	}
	fromKernel := map[frameType]bool{}
	for _, f := range frameTypes {
		fromKernel[f.T] = fromKernel[f.T] || f.Dir == toHost
	}
	for ft, ok := range fromKernel {
		raw := []byte(`"` + string(ft) + `"`)
		if got := receivedType(raw); ok != (got == ft) {
			t.Errorf("receivedType(%s) = %q; the kernel sends it: %v", raw, got, ok)
		}
	}
}
