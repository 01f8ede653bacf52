package seam

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckContext(t *testing.T) {
	for _, c := range []*CellContext{nil, {}, {ID: "default"}, {ID: "a_B-9", Cwd: "/work/x", Reset: true}} {
		if err := CheckContext("context", c); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for c, want := range map[*CellContext]string{
		{Cwd: "/work"}:                "context.id is required",
		{Reset: true}:                 "context.id is required",
		{ID: "a/b"}:                   "context.id",
		{ID: strings.Repeat("a", 65)}: "context.id",
		{ID: "a", Cwd: "work"}:        "context.cwd",
		{ID: "a", Cwd: "/w\x00"}:      "context.cwd",
		{ID: "a", Cwd: "/" + strings.Repeat("a", 4096)}: "context.cwd",
	} {
		err := CheckContext("context", c)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want a bad request naming %s", c, err, want)
		}
	}
}
