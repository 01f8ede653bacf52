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

// TestJudge: a cell where jailcell agrees with Jupyter's run counts without
// a second run; one where they differ is left out if a second Jupyter run
// differs from the first there, and is a disagreement if not.
func TestJudge(t *testing.T) {
	out := func(s ...string) []Outcome {
		var o []Outcome
		for _, x := range s {
			o = append(o, Outcome{Status: "ok", Stdout: x})
		}
		return o
	}
	runs := 0
	again := func(second []Outcome) func() ([]Outcome, string, error) {
		return func() ([]Outcome, string, error) { runs++; return second, "", nil }
	}
	agree, judged, odd, err := Judge(out("a", "b"), "", out("a", "b"), again(nil))
	if err != nil || agree != 2 || judged != 2 || len(odd) != 0 || runs != 0 {
		t.Fatalf("all agreeing: %d/%d %v %v, %d second runs; want 2/2, none", agree, judged, odd, err, runs)
	}
	// Cell 1 random in Jupyter itself, cell 2 a real disagreement.
	agree, judged, odd, err = Judge(out("a", "r1", "c"), "", out("a", "r9", "x"), again(out("a", "r2", "c")))
	if err != nil || agree != 1 || judged != 2 || runs != 1 {
		t.Fatalf("one unstable, one disagreeing: %d/%d %v, %d second runs; want 1/2, one", agree, judged, err, runs)
	}
	if len(odd) != 2 || !odd[0].Unstable || odd[0].Cell != 1 || odd[1].Unstable || odd[1].Cell != 2 {
		t.Fatalf("odd cells: %+v; want cell 1 unstable, cell 2 a disagreement", odd)
	}
	if _, _, _, err := Judge(out("a"), "", out("a", "b"), again(nil)); err == nil {
		t.Fatal("cell counts differing: no error")
	}
	if _, _, _, err := Judge(out("a"), "", out("b"), again(out("a", "b"))); err == nil {
		t.Fatal("a second run with another cell count: no error")
	}
}
