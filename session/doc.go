// Package session keeps Python kernels alive between cells: it creates,
// runs, expires and cleans up sessions, each one long-lived sandbox built
// by isolate with a kernel from runner. It must never trust what comes out
// of a sandbox for a verdict, and never let a session outlive its TTL.
//
// The Manager keeps the lifecycle: admission, the session table, the cell
// path and lifetimes (manager.go, session.go, lifetime.go). Everything
// else is a part it hands a concern to, each reaching back only through a
// small interface it declares:
//
//   - warm starts (warmStarts, warmstarts.go): templates, zygotes, a
//     kernel's cold or restored start and the warm pool. Never the table,
//     admission or a session's lifetime.
//   - durability (durable, durable.go): what outlives a process: metadata,
//     hibernation, fork and snapshot images, persisted workspaces, the
//     shared store, lost sessions and the disk quotas. Never the table,
//     admission or the janitor.
//   - the workspace (Workspace, workspace.go): the host's file operations
//     on a session's workspace, watches and what a cell changed. Never the
//     table, admission or the janitor: a session only through the Manager,
//     which checks owner and state.
//   - the environment (environ, environ.go): a session's envs in its
//     kernels. Never the table, admission or the janitor.
//
// Two records sit beside them: what an ended id answers (endedIDs,
// ended.go) and what the configuration alone decides (Config, config.go).
// The API reaches the parts through session/seam, never this package's
// types.
package session
