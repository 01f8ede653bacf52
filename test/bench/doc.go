// Command bench measures jailcell against its peers on this machine, side by
// side in one run: cell round trips over JSON-lines and the Unix socket,
// session creates from the warm pool and cold, concurrency, throughput,
// memory, hibernation (checkpoint, restore, image size), and the same work
// on a Jupyter kernel, runc, bwrap and a bare chroot; and the "zygote"
// section, the zygote's targets (a preloaded cold create, 100 sessions at
// once, idle memory with 100 alive, round trips from Python and Go), each
// beside its peer with no pool, naming the start path each create took.
// It prints a table and
// writes out/results.json and out/bench.png (drawn by the rootfs's
// matplotlib through `jailcell run`).
//
// Run it as root through `make bench`; it starts its own jailcell processes
// on private state directories and sockets, and removes them afterwards.
// Every figure is a measurement, never a pass/fail test. It must never
// touch the host's own jailcell service, state directory or socket.
package main
