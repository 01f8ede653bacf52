package main

import "testing"

// smaps_rollup of an idle kernel on this host (kB), trimmed.
const rollup = `55d0c6c1e000-7ffd1b9f4000 ---p 00000000 00:00 0                          [rollup]
Rss:               76532 kB
Pss:               71812 kB
Pss_Dirty:         70100 kB
Pss_Anon:          70100 kB
Pss_File:           1712 kB
Shared_Clean:       5604 kB
Shared_Dirty:          0 kB
Private_Clean:       828 kB
Private_Dirty:     70100 kB
Referenced:        76532 kB
Anonymous:         70100 kB
`

func TestParseSmapsRollup(t *testing.T) {
	for _, c := range []struct {
		name     string
		in       string
		uss, pss float64
	}{
		{"kernel", rollup, (828 + 70100) * 1024, 71812 * 1024},
		{"empty", "", 0, 0},
		// Pss_Dirty and the like must not count as Pss.
		{"prefixes only", "Pss_Anon: 5 kB\nPrivate_Hugetlb: 7 kB\n", 0, 0},
		{"garbage", "Pss: x kB\nPrivate_Dirty:\n", 0, 0},
	} {
		uss, pss := parseSmapsRollup([]byte(c.in))
		if uss != c.uss || pss != c.pss {
			t.Errorf("%s: uss %v pss %v, want %v %v", c.name, uss, pss, c.uss, c.pss)
		}
	}
}

func TestStartsString(t *testing.T) {
	s := starts{}
	for _, p := range []string{"template", "import", "template", "", "zygote", "other"} {
		s.add(p)
	}
	// The three known paths always, in a fixed order, then any other.
	if got, want := s.String(), "start: zygote 1, template 2, import 1, ? 1, other 1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := (starts{}).String(), "start: zygote 0, template 0, import 0"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestTemplateLine(t *testing.T) {
	for line, want := range map[string]bool{
		`{"level":"INFO","msg":"session template ready","policy":"default"}`:                                       true,
		`{"level":"WARN","msg":"session template not built: creates of this policy import the preload"}`:           true,
		`{"level":"INFO","msg":"sessions start by importing the preload: no template without checkpoint/restore"}`: true,
		`{"level":"WARN","msg":"templates off","err":"x"}`:                                                         true,
		`{"level":"INFO","msg":"session created","session":"n-1"}`:                                                 false,
		`{"level":"DEBUG","msg":"kernel restored from template","session":"n-1"}`:                                  false,
	} {
		if got := templateLine(line); got != want {
			t.Errorf("templateLine(%s) = %v, want %v", line, got, want)
		}
	}
}
