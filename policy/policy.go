package policy

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid policy")

// Network modes.
const (
	// NetworkNone gives the sandbox a private network namespace with
	// loopback only. It is the default.
	NetworkNone = "none"
)

// Policy is everything a sandbox is built from. The zero value is not
// usable; start from Default. Every field is a ceiling or a switch that
// makes isolation stronger; options that weaken it are named for what
// they do.
type Policy struct {
	// Name identifies a named policy from config ("default" unless set).
	Name string `json:"name,omitempty" mapstructure:"name"`

	// MemoryBytes caps the sandbox's memory cgroup (swap is disabled, so
	// this is RAM plus tmpfs pages the sandbox writes). Default 1 GiB.
	MemoryBytes int64 `json:"memory_bytes,omitempty" mapstructure:"memory_bytes"`
	// Pids caps the number of tasks (processes and threads). Default 128.
	Pids int64 `json:"pids,omitempty" mapstructure:"pids"`
	// CPUs is the CPU bandwidth in cores (CFS quota). Default 1.
	CPUs float64 `json:"cpus,omitempty" mapstructure:"cpus"`
	// DiskBytes bounds what the sandbox can write to its root filesystem
	// and workspace (the overlay's upper layer). Default 512 MiB.
	DiskBytes int64 `json:"disk_bytes,omitempty" mapstructure:"disk_bytes"`
	// DiskInodes bounds the number of files in the upper layer. Default 65536.
	DiskInodes int64 `json:"disk_inodes,omitempty" mapstructure:"disk_inodes"`
	// TmpBytes bounds /tmp, a separate tmpfs. Default 64 MiB.
	TmpBytes int64 `json:"tmp_bytes,omitempty" mapstructure:"tmp_bytes"`
	// OpenFiles is RLIMIT_NOFILE inside the sandbox. Default 1024.
	OpenFiles uint64 `json:"open_files,omitempty" mapstructure:"open_files"`

	// Timeout is a cell's wall-clock timeout when a request names none.
	// Default 60 s.
	Timeout time.Duration `json:"timeout,omitempty" mapstructure:"timeout"`
	// MaxTimeout is the ceiling a request's timeout is clamped to.
	// Default 10 min.
	MaxTimeout time.Duration `json:"max_timeout,omitempty" mapstructure:"max_timeout"`
	// InterruptGrace is how long a timed-out cell has to stop after its
	// KeyboardInterrupt before the sandbox is killed. Default 2 s.
	InterruptGrace time.Duration `json:"interrupt_grace,omitempty" mapstructure:"interrupt_grace"`

	// OutputBytes caps each of stdout and stderr captured per cell;
	// the rest is dropped and the result marked truncated. Default 1 MiB.
	OutputBytes int64 `json:"output_bytes,omitempty" mapstructure:"output_bytes"`
	// ReturnFileBytes caps the total content of files handed back from a
	// one-shot cell (their sandbox is gone afterwards). Default 16 MiB.
	ReturnFileBytes int64 `json:"return_file_bytes,omitempty" mapstructure:"return_file_bytes"`

	// Network is the network mode: "none" (default: loopback only) or
	// "allowlist" (only what Allow names; see docs/egress.md).
	Network string `json:"network,omitempty" mapstructure:"network"`
	// Allow is the egress allowlist for network "allowlist". Default
	// none. A pointer keeps Policy comparable; treat the list as immutable.
	Allow *[]Allow `json:"allow,omitempty" mapstructure:"allow"`
	// SeccompErrno is the errno a refused system call returns:
	// "EPERM" (default) or "ENOSYS".
	SeccompErrno string `json:"seccomp_errno,omitempty" mapstructure:"seccomp_errno"`

	// Degraded allows a fallback when a cell cannot be made to work:
	// "stateless" runs it once more in a fresh one-shot sandbox under this
	// same policy with standard-library-only Python, the result marked
	// "mode":"degraded". Default "" (no degraded run). It never lessens
	// isolation, only what the cell can import.
	Degraded string `json:"degraded,omitempty" mapstructure:"degraded"`
}

// Default returns the secure defaults every field comment names.
func Default() Policy {
	return Policy{
		Name:            "default",
		MemoryBytes:     1 << 30,
		Pids:            128,
		CPUs:            1,
		DiskBytes:       512 << 20,
		DiskInodes:      65536,
		TmpBytes:        64 << 20,
		OpenFiles:       1024,
		Timeout:         60 * time.Second,
		MaxTimeout:      10 * time.Minute,
		InterruptGrace:  2 * time.Second,
		OutputBytes:     1 << 20,
		ReturnFileBytes: 16 << 20,
		Network:         NetworkNone,
		SeccompErrno:    "EPERM",
	}
}

type check func(p *Policy) error

func rangeInt(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return fmt.Errorf("%w: %s = %d, allowed %d..%d", ErrInvalid, field, v, lo, hi)
	}
	return nil
}

func rangeDur(field string, v, lo, hi time.Duration) error {
	if v < lo || v > hi {
		return fmt.Errorf("%w: %s = %s, allowed %s..%s", ErrInvalid, field, v, lo, hi)
	}
	return nil
}

var checks = []check{
	func(p *Policy) error { return rangeInt("memory_bytes", p.MemoryBytes, 32<<20, 1<<40) },
	func(p *Policy) error { return rangeInt("pids", p.Pids, 8, 1<<16) },
	func(p *Policy) error {
		// Written so NaN fails too: it passed "< 0.05 || > 1024", became
		// a negative CFS quota, and that is no CPU limit at all.
		if !(p.CPUs >= 0.05 && p.CPUs <= 1024) {
			return fmt.Errorf("%w: cpus = %g, allowed 0.05..1024", ErrInvalid, p.CPUs)
		}
		return nil
	},
	func(p *Policy) error { return rangeInt("disk_bytes", p.DiskBytes, 1<<20, 1<<40) },
	func(p *Policy) error { return rangeInt("disk_inodes", p.DiskInodes, 64, 1<<24) },
	func(p *Policy) error { return rangeInt("tmp_bytes", p.TmpBytes, 1<<20, 1<<40) },
	func(p *Policy) error { return rangeInt("open_files", int64(p.OpenFiles), 64, 1<<20) },
	func(p *Policy) error { return rangeDur("max_timeout", p.MaxTimeout, time.Second, 24*time.Hour) },
	func(p *Policy) error { return rangeDur("timeout", p.Timeout, 100*time.Millisecond, p.MaxTimeout) },
	func(p *Policy) error {
		return rangeDur("interrupt_grace", p.InterruptGrace, 10*time.Millisecond, time.Minute)
	},
	func(p *Policy) error { return rangeInt("output_bytes", p.OutputBytes, 1024, 1<<30) },
	func(p *Policy) error { return rangeInt("return_file_bytes", p.ReturnFileBytes, 0, 1<<30) },
	checkNetwork,
	func(p *Policy) error {
		if _, ok := Errnos[p.SeccompErrno]; !ok {
			return fmt.Errorf("%w: seccomp_errno = %q, allowed EPERM or ENOSYS", ErrInvalid, p.SeccompErrno)
		}
		return nil
	},
	func(p *Policy) error {
		if p.Degraded != "" && p.Degraded != "stateless" {
			return fmt.Errorf("%w: degraded = %q, allowed \"\" or \"stateless\"", ErrInvalid, p.Degraded)
		}
		return nil
	},
}

// Errnos maps the allowed SeccompErrno names to their numbers (x86-64 and
// arm64 agree on both).
var Errnos = map[string]uint{"EPERM": 1, "ENOSYS": 38}

// Validate checks every field and returns all errors found, each naming the
// field, its value and the allowed range.
func (p *Policy) Validate() error {
	var errs []error
	for _, c := range checks {
		if err := c(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Override is the part of a policy a request may tighten (or loosen up to
// the ceiling Policy it is applied to). Nil fields keep the base value.
type Override struct {
	MemoryBytes *int64   `json:"memory_bytes,omitempty"`
	Pids        *int64   `json:"pids,omitempty"`
	CPUs        *float64 `json:"cpus,omitempty"`
	DiskBytes   *int64   `json:"disk_bytes,omitempty"`
	OutputBytes *int64   `json:"output_bytes,omitempty"`
	TimeoutS    *float64 `json:"timeout_s,omitempty"`
	// Allow replaces the policy's allowlist with a subset of it; an empty
	// list turns the network off.
	Allow *[]Allow `json:"allow,omitempty"`
}

// Apply returns base with o applied. A value above base's own is refused:
// a request can only tighten the policy it runs under.
func (o *Override) Apply(base Policy) (Policy, error) {
	p := base
	if o == nil {
		return p, nil
	}
	var errs []error
	tighten := func(field string, v *int64, dst *int64) {
		if v == nil {
			return
		}
		if *v > *dst || *v <= 0 {
			errs = append(errs, fmt.Errorf("%w: %s = %d, allowed 1..%d (the policy's ceiling)", ErrInvalid, field, *v, *dst))
			return
		}
		*dst = *v
	}
	tighten("memory_bytes", o.MemoryBytes, &p.MemoryBytes)
	tighten("pids", o.Pids, &p.Pids)
	tighten("disk_bytes", o.DiskBytes, &p.DiskBytes)
	tighten("output_bytes", o.OutputBytes, &p.OutputBytes)
	if o.CPUs != nil {
		if !(*o.CPUs > 0 && *o.CPUs <= p.CPUs) { // NaN fails
			errs = append(errs, fmt.Errorf("%w: cpus = %g, allowed up to %g (the policy's ceiling)", ErrInvalid, *o.CPUs, p.CPUs))
		} else {
			p.CPUs = *o.CPUs
		}
	}
	if o.TimeoutS != nil {
		d := time.Duration(*o.TimeoutS * float64(time.Second))
		if d <= 0 || d > p.MaxTimeout {
			errs = append(errs, fmt.Errorf("%w: timeout_s = %g, allowed up to %g", ErrInvalid, *o.TimeoutS, p.MaxTimeout.Seconds()))
		} else {
			p.Timeout = d
		}
	}
	if o.Allow != nil {
		if len(*o.Allow) == 0 {
			p.Network, p.Allow = NetworkNone, nil
		} else if err := narrowNetwork(&p, *o.Allow); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return base, err
	}
	return p, p.Validate()
}

// CellTimeout resolves a request's timeout in seconds (0 = not given) to the
// duration a cell gets: the default when absent, clamped to MaxTimeout.
func (p *Policy) CellTimeout(seconds float64) (time.Duration, error) {
	if !(seconds >= 0) { // NaN fails
		return 0, fmt.Errorf("%w: timeout_s = %g, must be positive", ErrInvalid, seconds)
	}
	if seconds == 0 {
		return p.Timeout, nil
	}
	d := time.Duration(seconds * float64(time.Second))
	if d > p.MaxTimeout {
		d = p.MaxTimeout
	}
	if d < 10*time.Millisecond {
		d = 10 * time.Millisecond
	}
	return d, nil
}
