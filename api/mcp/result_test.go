package mcp

import (
	"reflect"
	"strings"
	"testing"

	"github.com/jailcell/jailcell/session/seam"
)

// TestMCPResultMatchesWire: MCP's run_python output is a view of
// seam.Result, the one declaration of the cell result; the fields it
// shares keep their JSON names and tags, so a client reading both sees
// one name for one thing. Value is text here (the text/plain of the
// bundle), a MIME bundle on the wire: a different field on purpose.
func TestMCPResultMatchesWire(t *testing.T) {
	wire := map[string]reflect.StructField{}
	rt := reflect.TypeOf(seam.Result{})
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		wire[name] = f
	}
	mt := reflect.TypeOf(runPythonOut{})
	for _, name := range []string{"status", "stdout", "stderr", "error"} {
		w, ok := wire[name]
		if !ok {
			t.Errorf("seam.Result lacks %q", name)
			continue
		}
		var m reflect.StructField
		for i := range mt.NumField() {
			if n, _, _ := strings.Cut(mt.Field(i).Tag.Get("json"), ","); n == name {
				m = mt.Field(i)
			}
		}
		if m.Name == "" {
			t.Errorf("runPythonOut lacks %q", name)
		} else if m.Tag.Get("json") != w.Tag.Get("json") || m.Type.Kind() != w.Type.Kind() {
			t.Errorf("runPythonOut.%s is %s `%s`, seam.Result's is %s `%s`", m.Name, m.Type.Kind(), m.Tag.Get("json"), w.Type.Kind(), w.Tag.Get("json"))
		}
	}
}
