package e2b

import "net/http"

func (d *Door) routeFilesystem(m *http.ServeMux) {}
