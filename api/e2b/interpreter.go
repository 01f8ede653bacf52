package e2b

// The code interpreter's routes on a sandbox's port 49999: /execute and
// /contexts. (Stub.)
func (d *Door) routeInterpreter() {}
