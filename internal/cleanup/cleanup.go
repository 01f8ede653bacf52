package cleanup

import "errors"

// Stack holds undo steps. The zero value is ready to use.
type Stack struct {
	fns []func() error
}

// Add registers the undo of a step that just succeeded.
func (c *Stack) Add(f func() error) { c.fns = append(c.fns, f) }

// Run undoes every step, last first, and returns all errors joined.
func (c *Stack) Run() error {
	var errs []error
	for i := len(c.fns) - 1; i >= 0; i-- {
		if err := c.fns[i](); err != nil {
			errs = append(errs, err)
		}
	}
	c.fns = nil
	return errors.Join(errs...)
}

// Release forgets the steps: setup succeeded and the owner now undoes it.
// It returns them, in the order they were added, for an owner that keeps
// them.
func (c *Stack) Release() []func() error {
	fns := c.fns
	c.fns = nil
	return fns
}
