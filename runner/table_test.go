package runner

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDecodeTable: a table keeps its columns in order and comes out as
// valid JSON of valid UTF-8; anything not a table within the caps is
// left out, never an error (the item keeps its bundle).
func TestDecodeTable(t *testing.T) {
	got := decodeTable([]byte(`{"b": [1, 2.5, null, true], "a": ["x", "\ud800", "\u00fc"]}`))
	if string(got) != `{"b":[1,2.5,null,true],"a":["x","`+"\ufffd"+`","ü"]}` {
		t.Errorf("table = %s", got)
	}
	if !json.Valid(got) {
		t.Errorf("not valid JSON: %s", got)
	}
	many := `{"a":[` + strings.Repeat("1,", maxTableCells) + `1]}`
	wide := `{` + strings.Repeat(`"c":[],`, maxTableColumns) + `"c":[]}`
	for name, raw := range map[string]string{
		"not an object":         `[1]`,
		"a column not a list":   `{"a": 1}`,
		"a nested value":        `{"a": [[1]]}`,
		"an object value":       `{"a": [{"k": 1}]}`,
		"too many cells":        many,
		"too many columns":      wide,
		"a long string":         `{"a": ["` + strings.Repeat("x", maxTableText+1) + `"]}`,
		"a long name":           `{"` + strings.Repeat("x", maxTableText+1) + `": []}`,
		"a number past float64": `{"a": [1e400]}`,
		"too large":             `{"a": ["` + strings.Repeat("x", maxTableBytes) + `"]}`,
	} {
		if got := decodeTable([]byte(raw)); got != nil {
			t.Errorf("%s: kept %.80s, want none", name, got)
		}
	}
}
