package conformance

import "testing"

// TestNormaliseTimings: what a cell's timing makes differ between two
// runs (%prun's seconds and its table, %time's units) compares equal; the
// rest of the text still counts.
func TestNormaliseTimings(t *testing.T) {
	a := "4 function calls in 0.000 seconds\n\n Ordered by: internal time\n\n ncalls tottime percall cumtime percall filename:lineno(function)\n 1 0.000 0.000 0.000 0.000 {built-in method builtins.exec}\n 1/1 0.000 0.000 0.000 0.000 <string>:1(<module>)"
	b := "4 function calls in 0.006 seconds\n\n Ordered by: internal time\n\n ncalls tottime percall cumtime percall filename:lineno(function)\n 1 0.006 0.006 0.006 0.006 {built-in method builtins.exec}\n 1/1 0.000 0.000 0.000 0.000 <string>:1(<module>)"
	if na, nb := Normalise(a, ""), Normalise(b, ""); na != nb {
		t.Errorf("prun outputs differ after Normalise:\n%s\n%s", na, nb)
	}
	if Normalise("Wall time: 1.2 ms", "") != Normalise("Wall time: 3 s", "") {
		t.Errorf("the outputs of %%time differ after Normalise")
	}
	if Normalise("5 function calls in 0.1 seconds", "") == Normalise("4 function calls in 0.1 seconds", "") {
		t.Error("a different call count compared equal")
	}
}
