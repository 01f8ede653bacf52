// Package procfs reads what isolate needs of /proc/PID/stat: a process's
// name, state, parent and thread count, one process or the whole table.
//
// It only reads: it must never signal, trace or otherwise touch a process.
// A process sets its own name (PR_SET_NAME): callers must not trust the
// name alone.
package procfs
