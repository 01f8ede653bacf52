package cleanup

import (
	"errors"
	"slices"
	"testing"
)

func TestRunUndoesLastFirstAndJoinsErrors(t *testing.T) {
	var c Stack
	var order []int
	e1, e3 := errors.New("one"), errors.New("three")
	c.Add(func() error { order = append(order, 1); return e1 })
	c.Add(func() error { order = append(order, 2); return nil })
	c.Add(func() error { order = append(order, 3); return e3 })
	err := c.Run()
	if !slices.Equal(order, []int{3, 2, 1}) {
		t.Errorf("undo order %v, want 3 2 1", order)
	}
	if !errors.Is(err, e1) || !errors.Is(err, e3) {
		t.Errorf("Run = %v, want both undo errors", err)
	}
	if err := c.Run(); err != nil || len(order) != 3 {
		t.Errorf("a second Run undid again: %v, %v", err, order)
	}
}

func TestReleaseForgets(t *testing.T) {
	var c Stack
	ran := false
	c.Add(func() error { ran = true; return nil })
	if fns := c.Release(); len(fns) != 1 {
		t.Fatalf("Release returned %d steps, want 1", len(fns))
	}
	if err := c.Run(); err != nil || ran {
		t.Errorf("Run after Release undid a released step (%v, ran %v)", err, ran)
	}
}
