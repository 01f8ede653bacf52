package hostfeatures

// Features is what this host can give a sandbox, found by isolate's
// probe.
type Features struct {
	Kernel string `json:"kernel"`
	// CgroupMode is "v2" (unified), "hybrid" (v1 controllers plus a v2
	// mount) or "v1".
	CgroupMode string `json:"cgroup_mode"`
	// Controllers lists the needed controllers found (memory, pids, cpu).
	Controllers []string `json:"controllers"`
	// SwapLimit says whether swap can be held at zero for a sandbox.
	SwapLimit bool `json:"swap_limit"`
	UserNS    bool `json:"user_namespace"`
	Overlay   bool `json:"overlay"`
	IDMap     bool `json:"idmapped_mounts"`
	Seccomp   bool `json:"seccomp"`
	// SeccompVersion is libseccomp's version, when compiled in.
	SeccompVersion string `json:"seccomp_version,omitempty"`
	// Problems lists each missing feature: a kind (ID) to match on, and in
	// words what is missing and how to fix it.
	Problems []Problem `json:"problems,omitempty"`
}

// ProblemID names a kind of probe problem: callers (doctor) match the
// kind, never the words, which may change.
type ProblemID string

// Problem is one missing feature. On the wire it is its text alone, as
// it always was: a client shows it to a person.
type Problem struct {
	ID   ProblemID
	Text string
}

func (p Problem) String() string { return p.Text }

// MarshalText writes the problem's words.
func (p Problem) MarshalText() ([]byte, error) { return []byte(p.Text), nil }

// UnmarshalText reads the words back; the kind does not travel.
func (p *Problem) UnmarshalText(b []byte) error {
	p.Text = string(b)
	return nil
}

// OK reports whether a sandbox can be built with full isolation.
func (f Features) OK() bool { return len(f.Problems) == 0 }
