package mcp

import "github.com/jailcell/jailcell/internal/sessiontest"

// newTestManager is a real manager on the built rootfs.
var newTestManager = sessiontest.Manager
