package mcp

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/session/seam"
)

// TestMCPPagerText: text a magic sent to IPython's pager reaches an MCP
// client marked [pager], after the cell's stdout, never as part of it.
func TestMCPPagerText(t *testing.T) {
	res := &seam.Result{Status: "ok", Stdout: "printed\n", Display: []seam.DisplayItem{
		{MIME: "text/plain", Data: "Signature: len(obj, /)", Pager: true},
		{MIME: "text/plain", Data: "shown"},
	}}
	out, so := cellResult(&api.Response{Result: res}, "")
	if len(out.Content) != 1 {
		t.Fatalf("%d content blocks, want 1 text block", len(out.Content))
	}
	text := out.Content[0].(*mcp.TextContent).Text
	if want := "printed\n[pager]\nSignature: len(obj, /)\nshown\n"; text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	if so.Stdout != "printed\n" {
		t.Errorf("structured stdout %q", so.Stdout)
	}
}
