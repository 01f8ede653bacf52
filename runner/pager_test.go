package runner

import (
	"errors"
	"testing"
)

// TestPagerItemDecode: the pager mark of a display item is a boolean the
// kernel may forge like anything else; anything but a boolean (or null) is
// a protocol error, and it never adds to what the item may cost.
func TestPagerItemDecode(t *testing.T) {
	cases := []struct {
		name, item string
		pager      bool
		err        bool
	}{
		{"pager", `{"mime":"text/plain","data":"help","pager":true}`, true, false},
		{"not pager", `{"mime":"text/plain","data":"x","pager":false}`, false, false},
		{"null", `{"mime":"text/plain","data":"x","pager":null}`, false, false},
		{"absent", `{"mime":"text/plain","data":"x"}`, false, false},
		{"string", `{"mime":"text/plain","data":"x","pager":"yes"}`, false, true},
		{"object", `{"mime":"text/plain","data":"x","pager":{"a":[1]}}`, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := socketConn(t, func(n int) [][]byte {
				return [][]byte{rawFrame([]byte(`{"t":"result","id":"c1","status":"ok","display":[` + tc.item + `]}`))}
			})
			defer c.Close()
			r, err := c.Exec(ExecRequest{ID: "c1", Code: "x", MaxOutput: 1 << 10}, nil)
			if tc.err {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("err %v, want ErrProtocol", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Display) != 1 || r.Display[0].Pager != tc.pager {
				t.Errorf("display %+v, want one item with pager %v", r.Display, tc.pager)
			}
		})
	}
}
