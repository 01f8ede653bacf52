package isolate

import (
	"strconv"
	"strings"
	"testing"
)

// counterFiles are contents of the files cgroupFiles parses, as the
// kernel writes them, and some that it does not.
var counterFiles = []string{
	"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", // v1 memory.oom_control
	"max 5\n", // pids.events
	"low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n", // v2 memory.events
	"usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n",          // v2 cpu.stat
	"12345678\n", "max\n", "0", " 7 \n", "",
	"oom_kill 1 2\n", "oom_kill\n", "oom_kill -1\n", "oom_kill 18446744073709551615\n", "oom_kill 18446744073709551616\n",
	"oom_kill\t4\r\n", "oom_kill\v5\n", "xoom_kill 9\noom_kill 8\n", "oom_kill 0x10\n", "+5\n", "99999999999999999999999\n",
}

// keyedRef and singleRef are the parsers cgroupFiles used before it
// parsed in place: the fast ones must agree with them.
func keyedRef(b []byte, key string) (uint64, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			v, err := strconv.ParseUint(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

func singleRef(b []byte) (uint64, bool) {
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

func TestCounterParsers(t *testing.T) {
	for _, c := range counterFiles {
		for _, key := range []string{"oom_kill", "max", "usage_usec"} {
			v, ok := keyedValue([]byte(c), key)
			rv, rok := keyedRef([]byte(c), key)
			if ok != rok || ok && v != rv {
				t.Errorf("keyedValue(%q, %q) = %d, %v; want %d, %v", c, key, v, ok, rv, rok)
			}
		}
		v, ok := singleValue([]byte(c))
		rv, rok := singleRef([]byte(c))
		if ok != rok || ok && v != rv {
			t.Errorf("singleValue(%q) = %d, %v; want %d, %v", c, v, ok, rv, rok)
		}
	}
	if v, ok := keyedValue([]byte(counterFiles[0]), "oom_kill"); !ok || v != 3 {
		t.Errorf("oom_kill of a v1 oom_control: %d, %v; want 3", v, ok)
	}
}

// FuzzCounterParsers: on any content, the in-place parsers agree with the
// reference ones.
func FuzzCounterParsers(f *testing.F) {
	for _, c := range counterFiles {
		f.Add(c, "oom_kill")
	}
	f.Fuzz(func(t *testing.T, c, key string) {
		if key == "" || strings.ContainsAny(key, " \t\n\r\v\f") {
			return // keys are single words
		}
		v, ok := keyedValue([]byte(c), key)
		rv, rok := keyedRef([]byte(c), key)
		if ok != rok || ok && v != rv {
			t.Errorf("keyedValue(%q, %q) = %d, %v; want %d, %v", c, key, v, ok, rv, rok)
		}
		v, ok = singleValue([]byte(c))
		rv, rok = singleRef([]byte(c))
		if ok != rok || ok && v != rv {
			t.Errorf("singleValue(%q) = %d, %v; want %d, %v", c, v, ok, rv, rok)
		}
	})
}
