package runner

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// A table is a pandas DataFrame's columns, {"name": [values, ...], ...},
// in the frame's column order: E2B's Result.data
// (DataFrame.to_dict(orient="list")), sent by the kernel beside the
// frame's MIME bundle for a frame of at most tableCells cells. It comes out
// of the sandbox: decodeTable keeps one only if it has that shape within
// the caps below, and encodes it anew, so that what goes on is valid JSON
// of valid UTF-8 whatever the sandbox wrote.
const (
	maxTableBytes   = 1 << 20 // its JSON as the kernel sent it
	maxTableColumns = 1000
	maxTableCells   = 10000 // the kernel's TABLE_CELLS
	maxTableText    = 4 << 10
)

// decodeTable returns the table raw holds, encoded anew, or nil if raw is
// not a table within the caps (the item keeps its bundle; a table is a
// convenience, never the only copy of the output).
func decodeTable(raw []byte) json.RawMessage {
	if kind(raw) != '{' || len(raw) > maxTableBytes {
		return nil
	}
	var out bytes.Buffer
	out.WriteByte('{')
	columns, cells, ok := 0, 0, true
	_ = eachMember(raw, func(k, v []byte) error {
		columns++
		if columns > maxTableColumns || kind(v) != '[' {
			ok = false
			return errChart
		}
		name, _, cut := unquote(k, maxTableText)
		if cut {
			ok = false
			return errChart
		}
		if columns > 1 {
			out.WriteByte(',')
		}
		writeJSON(&out, name)
		out.WriteString(":[")
		n := 0
		eachElement(v, func(x []byte) bool {
			cells++
			if cells > maxTableCells {
				ok = false
				return false
			}
			if n > 0 {
				out.WriteByte(',')
			}
			n++
			switch kind(x) {
			case 'n', 't', 'f':
				out.Write(x) // null, true, false: nothing else starts so
			case '0':
				f, err := strconv.ParseFloat(string(x), 64)
				if err != nil {
					ok = false
					return false
				}
				writeJSON(&out, f)
			case '"':
				s, _, cut := unquote(x, maxTableText)
				if cut {
					ok = false
					return false
				}
				writeJSON(&out, s)
			default:
				ok = false
				return false
			}
			return true
		})
		out.WriteByte(']')
		if !ok {
			return errChart
		}
		return nil
	})
	if !ok {
		return nil
	}
	out.WriteByte('}')
	return json.RawMessage(out.Bytes())
}

// writeJSON appends v's JSON; v is a string or a finite float64, which
// always encode.
func writeJSON(b *bytes.Buffer, v any) {
	enc, _ := json.Marshal(v)
	b.Write(enc)
}
