package e2b

import "net/http"

// processes remembers the commands the process service started, by
// sandbox and pid. (Stub: filled in by the process service.)
type processes struct{}

func newProcesses() *processes { return &processes{} }

// forget drops a killed sandbox's processes.
func (p *processes) forget(id string) {}

func (d *Door) routeProcess(m *http.ServeMux) {}
