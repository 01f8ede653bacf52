package setupcell

// Mark is set on the daemon's own cell; its zero value is every other
// cell.
type Mark struct{ on bool }

// On marks the daemon's own cell.
var On = Mark{on: true}

// Set reports whether the mark is on.
func (m Mark) Set() bool { return m.on }
