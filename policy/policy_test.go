package policy

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	p := Default()
	if err := p.Validate(); err != nil {
		t.Fatalf("default policy invalid: %v", err)
	}
	if p.Network != NetworkNone {
		t.Fatalf("default network %q, want none", p.Network)
	}
}

func TestValidateNamesFieldAndRange(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Policy)
		want   string
	}{
		{"memory too small", func(p *Policy) { p.MemoryBytes = 1 }, "memory_bytes = 1, allowed"},
		{"pids zero", func(p *Policy) { p.Pids = 0 }, "pids = 0, allowed 8.."},
		{"cpus negative", func(p *Policy) { p.CPUs = -1 }, "cpus = -1"},
		{"disk zero", func(p *Policy) { p.DiskBytes = 0 }, "disk_bytes = 0"},
		{"inodes", func(p *Policy) { p.DiskInodes = 1 }, "disk_inodes = 1"},
		{"tmp", func(p *Policy) { p.TmpBytes = 10 }, "tmp_bytes = 10"},
		{"open files", func(p *Policy) { p.OpenFiles = 1 }, "open_files = 1"},
		{"timeout above max", func(p *Policy) { p.Timeout = time.Hour }, "timeout = 1h0m0s"},
		{"grace", func(p *Policy) { p.InterruptGrace = 0 }, "interrupt_grace = 0s"},
		{"output", func(p *Policy) { p.OutputBytes = 1 }, "output_bytes = 1"},
		{"network", func(p *Policy) { p.Network = "host" }, `network = "host", allowed "none"`},
		{"errno", func(p *Policy) { p.SeccompErrno = "EACCES" }, `seccomp_errno = "EACCES"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Default()
			c.mutate(&p)
			err := p.Validate()
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate() = %v, want ErrInvalid containing %q", err, c.want)
			}
		})
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	p := Default()
	p.MemoryBytes, p.Pids = 0, 0
	err := p.Validate()
	if err == nil || !strings.Contains(err.Error(), "memory_bytes") || !strings.Contains(err.Error(), "pids") {
		t.Fatalf("want both fields named: %v", err)
	}
}

func TestOverrideOnlyTightens(t *testing.T) {
	base := Default()
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	p, err := (&Override{MemoryBytes: i64(256 << 20), CPUs: f64(0.5), TimeoutS: f64(5)}).Apply(base)
	if err != nil || p.MemoryBytes != 256<<20 || p.CPUs != 0.5 || p.Timeout != 5*time.Second {
		t.Fatalf("Apply = %+v, %v", p, err)
	}
	for _, o := range []*Override{
		{MemoryBytes: i64(base.MemoryBytes * 2)},
		{Pids: i64(-1)},
		{CPUs: f64(64)},
		{TimeoutS: f64(1e6)},
	} {
		if _, err := o.Apply(base); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("Apply(%+v) loosened the policy: %v", o, err)
		}
	}
	if p, err := (*Override)(nil).Apply(base); err != nil || p != base {
		t.Fatalf("nil override changed the policy")
	}
}

func TestCellTimeout(t *testing.T) {
	p := Default()
	for _, c := range []struct {
		in   float64
		want time.Duration
		err  bool
	}{
		{0, p.Timeout, false},
		{1.5, 1500 * time.Millisecond, false},
		{1e9, p.MaxTimeout, false},
		{-1, 0, true},
	} {
		got, err := p.CellTimeout(c.in)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("CellTimeout(%g) = %s, %v", c.in, got, err)
		}
	}
}

// TestValidateRefusesNonFiniteCPUs: NaN passed the range check (every
// comparison with it is false), became a negative CFS quota, and that is
// no CPU limit. A config's `cpus: .nan` or JAILCELL_..._CPUS=nan did it.
func TestValidateRefusesNonFiniteCPUs(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		p := Default()
		p.CPUs = v
		if err := p.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cpus") {
			t.Errorf("cpus = %g: %v, want ErrInvalid naming cpus", v, err)
		}
		o := Override{CPUs: &v}
		if _, err := o.Apply(Default()); !errors.Is(err, ErrInvalid) {
			t.Errorf("override cpus = %g: %v, want ErrInvalid", v, err)
		}
	}
	p := Default()
	if _, err := p.CellTimeout(math.NaN()); !errors.Is(err, ErrInvalid) {
		t.Errorf("timeout NaN: %v, want ErrInvalid", err)
	}
}
