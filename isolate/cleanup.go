package isolate

import "errors"

// cleanup is one stack of undo steps for multi-step setup, run in reverse
// order unless released (after gVisor's pkg/cleanup).
type cleanup struct {
	fns []func() error
}

func (c *cleanup) add(f func() error) { c.fns = append(c.fns, f) }

// run undoes every step, last first, and returns all errors joined.
func (c *cleanup) run() error {
	var errs []error
	for i := len(c.fns) - 1; i >= 0; i-- {
		if err := c.fns[i](); err != nil {
			errs = append(errs, err)
		}
	}
	c.fns = nil
	return errors.Join(errs...)
}

// release forgets the steps: setup succeeded and the owner now undoes it.
func (c *cleanup) release() []func() error {
	fns := c.fns
	c.fns = nil
	return fns
}
