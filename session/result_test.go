package session

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/runner"
)

// TestKernelResultMatchesWire: Result is the one declaration of the cell
// result on the wire; runner.Result is the kernel's report that resultOf
// copies into it. A field both declare keeps one JSON name, kind and tag,
// and a field only one side has is listed here with the reason, so a
// field added to one and not the other fails until it is decided.
func TestKernelResultMatchesWire(t *testing.T) {
	for _, tc := range []struct {
		kernel, wire any
		// kernelOnly and wireOnly are the JSON fields one side has on
		// purpose; differ are shared fields whose tags differ on purpose.
		kernelOnly, wireOnly, differ []string
	}{
		{
			kernel: runner.Result{}, wire: Result{},
			// interrupted: the host's own clock decides timeout, never the
			// kernel's word; files, usage, state, limits are the host's.
			kernelOnly: []string{"interrupted"},
			wireOnly:   []string{"files", "usage", "state", "state_reason", "limits"},
		},
		{
			kernel: runner.CellError{}, wire: CellError{},
			// frames: the kernel's report always carries the list; the
			// wire leaves it out when empty.
			differ: []string{"frames"},
		},
		{
			kernel: runner.Frame{}, wire: Frame{},
			// code: the wire leaves out a frame's empty source line.
			differ: []string{"code"},
		},
		{kernel: runner.DisplayItem{}, wire: DisplayItem{}},
	} {
		k, w := resultFields(reflect.TypeOf(tc.kernel)), resultFields(reflect.TypeOf(tc.wire))
		for name, kt := range k {
			wt, ok := w[name]
			switch {
			case !ok && !slices.Contains(tc.kernelOnly, name):
				t.Errorf("%T has field %q that %T does not", tc.kernel, name, tc.wire)
			case ok && kt != wt && !slices.Contains(tc.differ, name):
				t.Errorf("%T.%s is %s, %T's is %s", tc.kernel, name, kt, tc.wire, wt)
			}
		}
		for name := range w {
			if _, ok := k[name]; !ok && !slices.Contains(tc.wireOnly, name) {
				t.Errorf("%T has field %q that %T does not", tc.wire, name, tc.kernel)
			}
		}
	}
}

// resultFields maps JSON names to the tag's options and the Go type.
func resultFields(t reflect.Type) map[string]string {
	out := map[string]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = "(" + opts + ") " + f.Type.Kind().String()
	}
	return out
}
