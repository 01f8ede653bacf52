// Package cgroupv2 holds the checks that only a pure cgroup v2 host can run;
// `make test-cgroupv2` runs them inside a throwaway QEMU guest
// (scripts/cgroupv2-vm.sh). They read the v2 counters (memory.events,
// pids.events, cpu.stat) that the session verdicts rest on, strictly: the
// session tests accept a verdict, these prove which counter gave it.
// It holds tests only, and must never create cgroups outside its own root
// (/jailcell-test-vmtest).
package cgroupv2
