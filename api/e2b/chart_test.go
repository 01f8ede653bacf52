package e2b

import (
	"encoding/json"
	"testing"

	"github.com/jailcell/jailcell/session/seam"
)

func f(v float64) *float64 { return &v }

// TestChartAsE2BSendsIt pins the shapes E2B's own chart tests read: every
// field of the type present, null for a missing title, label or unit,
// ISO dates on a datetime axis, E2B's axis names for horizontal bars.
func TestChartAsE2BSendsIt(t *testing.T) {
	enc := func(c *seam.Chart) map[string]any {
		t.Helper()
		b, err := json.Marshal(e2bChart(c))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// 2023-09-01 is day 19601 of matplotlib's 1970 epoch.
	line := enc(&seam.Chart{Type: "line", XLabel: "Time (s)", XUnit: "s", XScale: "datetime",
		XTicks: []float64{19601, 19601.5}, YTicks: []float64{-1, 1},
		Elements: []seam.ChartElement{{Label: "sin", Points: [][2]float64{{19601, 0.5}}}}})
	for k, want := range map[string]any{"title": nil, "x_label": "Time (s)", "y_label": nil, "x_unit": "s",
		"y_unit": nil, "x_scale": "datetime", "y_scale": "linear"} {
		if v, ok := line[k]; !ok || v != want {
			t.Errorf("line %s = %#v (present %v), want %#v", k, v, ok, want)
		}
	}
	if got := line["x_ticks"].([]any); got[0] != "2023-09-01T00:00:00+00:00" || got[1] != "2023-09-01T12:00:00+00:00" {
		t.Errorf("datetime ticks %v", got)
	}
	if got := line["y_ticks"].([]any); got[0] != -1.0 {
		t.Errorf("number ticks %v", got)
	}
	if got := line["x_tick_labels"].([]any); len(got) != 0 {
		t.Errorf("tick labels %v, want []", got)
	}
	p := line["elements"].([]any)[0].(map[string]any)["points"].([]any)[0].([]any)
	if p[0] != "2023-09-01T00:00:00" || p[1] != 0.5 {
		t.Errorf("datetime point %v", p)
	}

	bar := enc(&seam.Chart{Type: "bar", Title: "T", XLabel: "Count", YLabel: "Name", Orientation: "horizontal",
		Elements: []seam.ChartElement{{Label: "a", Group: "g", Value: f(3)}}})
	if bar["x_label"] != "Name" || bar["y_label"] != "Count" || bar["title"] != "T" || bar["orientation"] != nil {
		t.Errorf("horizontal bar %v", bar)
	}
	if e := bar["elements"].([]any)[0].(map[string]any); e["value"] != 3.0 || e["group"] != "g" || len(e) != 3 {
		t.Errorf("bar element %v", e)
	}

	box := enc(&seam.Chart{Type: "box_and_whisker", Elements: []seam.ChartElement{{Label: "A", Min: f(1), FirstQuartile: f(2), Median: f(3), ThirdQuartile: f(4), Max: f(5)}}})
	if e := box["elements"].([]any)[0].(map[string]any); e["median"] != 3.0 || len(e["outliers"].([]any)) != 0 {
		t.Errorf("box element %v", e)
	}

	sup := enc(&seam.Chart{Type: "superchart", Elements: []seam.ChartElement{{Chart: &seam.Chart{Type: "pie", Title: "P",
		Elements: []seam.ChartElement{{Label: "x", Angle: f(36), Radius: f(1)}}}}}})
	if sup["title"] != "" {
		t.Errorf("superchart without suptitle: title %#v, want \"\" as E2B's", sup["title"])
	}
	sub := sup["elements"].([]any)[0].(map[string]any)
	if sub["title"] != "P" || sub["elements"].([]any)[0].(map[string]any)["angle"] != 36.0 {
		t.Errorf("subchart %v", sub)
	}
	if _, ok := sub["x_label"]; ok {
		t.Errorf("a pie has no axes in E2B's model: %v", sub)
	}

	unk := enc(&seam.Chart{Type: "unknown", Title: "C", Reason: "why"})
	if unk["title"] != "C" || len(unk["elements"].([]any)) != 0 || unk["reason"] != "why" {
		t.Errorf("unknown %v", unk)
	}
}
