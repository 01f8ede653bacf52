package session

import (
	"strings"
	"testing"
)

// TestAutoMaxSessions: sessions.max "auto" takes the smallest bound and
// names it; a 24 GiB, 2-core host serves a thousand idle sessions.
func TestAutoMaxSessions(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name   string
		c      HostCapacity
		zygote bool
		pids   int64
		want   int
		why    string
	}{
		{"24 GiB, 2 cores", HostCapacity{MemoryBytes: 24 * gib, CPUs: 2, Slots: 4096, FileLimit: 524288}, true, 0, 1024, "512 per CPU on 2 CPUs"},
		{"24 GiB, 2 cores, no zygote", HostCapacity{MemoryBytes: 24 * gib, CPUs: 2, Slots: 4096, FileLimit: 524288}, false, 0, 128, "half of 24576 MiB of memory at 100 MB"},
		{"2 GiB", HostCapacity{MemoryBytes: 2 * gib, CPUs: 8, Slots: 4096, FileLimit: 1 << 20}, true, 0, 89, "half of 2048 MiB of memory at 12 MB"},
		{"256 GiB, 64 cores", HostCapacity{MemoryBytes: 256 * gib, CPUs: 64, Slots: 4096, FileLimit: 1 << 20}, true, 0, 4032, "4096 uid slots less 64"},
		{"few slots", HostCapacity{MemoryBytes: 256 * gib, CPUs: 64, Slots: 100, FileLimit: 1 << 20}, true, 0, 36, "100 uid slots"},
		{"file limit 4096", HostCapacity{MemoryBytes: 24 * gib, CPUs: 2, Slots: 4096, FileLimit: 4096}, true, 0, 192, "a file limit of 4096"},
		{"file limit below the reserve", HostCapacity{MemoryBytes: 24 * gib, CPUs: 2, Slots: 4096, FileLimit: 1024}, true, 0, 1, "a file limit of 1024"},
		{"unlimited files", HostCapacity{MemoryBytes: 24 * gib, CPUs: 2, Slots: 4096, FileLimit: ^uint64(0)}, true, 0, 1024, "per CPU"},
		{"pid_max 32768, 128 pids each", HostCapacity{MemoryBytes: 24 * gib, CPUs: 2, Slots: 4096, FileLimit: 20000, TaskLimit: 32768}, true, 128, 192, "3/4 of the host's 32768 tasks"},
		{"pid_max 4194304", HostCapacity{MemoryBytes: 24 * gib, CPUs: 2, Slots: 4096, FileLimit: 524288, TaskLimit: 4194304}, true, 128, 1024, "per CPU"},
		{"nothing read", HostCapacity{}, true, 0, MaxSessionsCeiling, "ceiling"},
	} {
		n, why := AutoMaxSessions(tc.c, tc.zygote, tc.pids)
		if n != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %d (%s), want %d (%s)", tc.name, n, why, tc.want, tc.why)
		}
	}
	// This machine's figures are read, not zero.
	c := ReadHostCapacity(0)
	if c.MemoryBytes == 0 || c.CPUs == 0 || c.Slots == 0 || c.FileLimit == 0 || c.TaskLimit == 0 {
		t.Errorf("ReadHostCapacity: %+v, want every figure read", c)
	}
}
