package session

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsBoundedCellStatus: every status is there from the start, and
// a status outside the known verdicts cannot mint a new series.
func TestMetricsBoundedCellStatus(t *testing.T) {
	m := newMetrics()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	for _, st := range []string{StatusOK, StatusOK, "forged-by-the-cell", "another-forged"} {
		m.cell(st)
	}
	m.CellSeconds.Observe(0.3)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "jailcell_cells_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
		}
	}
	if len(got) != len(CellStatuses)+1 || got[StatusOK] != 2 || got["other"] != 2 || got[StatusOOM] != 0 {
		t.Errorf("cells %v, want the %d statuses (ok 2) and other 2", got, len(CellStatuses))
	}
}
