package runner

import (
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"
)

// chartSeeds is the expected outcome of each seed of FuzzDecodeChart: the
// chart's type, or the words of the refusal.
var chartSeeds = map[string]struct {
	typ    string
	refuse string
	check  func(t *testing.T, c *Chart)
}{
	"line": {typ: "line", check: func(t *testing.T, c *Chart) {
		want := &Chart{Type: "line", Title: "Sales (2024)", XLabel: "Month", YLabel: "Revenue (USD)", YUnit: "USD",
			XScale: "linear", YScale: "log", XTicks: []float64{1, 2}, XTickLabels: []string{"Jan", "Feb"},
			Elements: []ChartElement{{Label: "a", Points: [][2]float64{{1, 2.5}, {2, -3e-7}}}, {}}}
		if !reflect.DeepEqual(c, want) {
			t.Errorf("got %+v\nwant %+v", c, want)
		}
	}},
	"scatter": {typ: "scatter", check: func(t *testing.T, c *Chart) {
		if !c.Truncated || len(c.Elements) != 1 || c.Elements[0].Points[0] != [2]float64{0, 0} {
			t.Errorf("got %+v", c)
		}
	}},
	"bar": {typ: "bar", check: func(t *testing.T, c *Chart) {
		if c.Orientation != "horizontal" || !c.Stacked || len(c.Elements) != 2 || *c.Elements[1].Value != -2.5 || c.Elements[1].Label != "b" || c.Elements[1].Group != "g" {
			t.Errorf("got %+v", c)
		}
	}},
	"pie": {typ: "pie", check: func(t *testing.T, c *Chart) {
		if len(c.Elements) != 2 || *c.Elements[1].Angle != 270 || *c.Elements[1].Radius != 1 {
			t.Errorf("got %+v", c)
		}
	}},
	"histogram": {typ: "histogram", check: func(t *testing.T, c *Chart) {
		if e := c.Elements[0]; !reflect.DeepEqual(e.Edges, []float64{0, 1, 2}) || !reflect.DeepEqual(e.Counts, []float64{3, 4}) {
			t.Errorf("got %+v", e)
		}
	}},
	"box": {typ: "box_and_whisker", check: func(t *testing.T, c *Chart) {
		e := c.Elements[0]
		if e.Label != "a" || *e.Min != 1 || *e.FirstQuartile != 2 || *e.Median != 3 || *e.ThirdQuartile != 4 || *e.Max != 5 ||
			!reflect.DeepEqual(e.Outliers, []float64{100}) {
			t.Errorf("got %+v", e)
		}
	}},
	"superchart": {typ: "superchart", check: func(t *testing.T, c *Chart) {
		if len(c.Elements) != 2 || c.Elements[0].Chart == nil || c.Elements[0].Type != "line" || c.Elements[0].Elements[0].Label != "x" ||
			c.Elements[1].Type != "unknown" || c.Elements[1].Reason != "an image" {
			t.Errorf("got %+v", c)
		}
		b, _ := json.Marshal(c)
		if !strings.Contains(string(b), `"elements":[{"type":"line","title":"l","elements":[{"label":"x","points":[[1,1]]}]}`) {
			t.Errorf("a subplot is not a chart inline, as E2B's superchart: %s", b)
		}
	}},
	"unknown": {typ: "unknown", check: func(t *testing.T, c *Chart) {
		if c.Reason != "3d axes" || c.Elements == nil {
			t.Errorf("got %+v", c)
		}
	}},
	"unicode-text": {typ: "bar", check: func(t *testing.T, c *Chart) {
		if c.Title != "\u00e9\U0001F600\u0001\uFFFD" || c.Elements[0].Label != "\u2028" {
			t.Errorf("title %q label %q", c.Title, c.Elements[0].Label)
		}
	}},
	"bad-type":            {refuse: `"sankey" is not one of line`},
	"no-type":             {refuse: "type is missing or not a string"},
	"nested-superchart":   {refuse: "a superchart inside a superchart"},
	"number-overflow":     {refuse: "not a finite number"},
	"number-as-string":    {refuse: "not a number"},
	"field-of-other-type": {refuse: `a line element has "value"`},
	"histogram-mismatch":  {refuse: "2 edges for 2 counts"},
	"point-not-pair":      {refuse: "not [x, y]"},
	"unknown-with-data":   {refuse: "1 elements in a unknown chart, at most 0"},
	"elements-not-list":   {refuse: "elements is not a list"},
	"title-not-string":    {refuse: `"title" is not a string`},
	"bad-orientation":     {refuse: "orientation is not"},
	"not-object":          {refuse: "not an object"},
	"key-invalid-utf8":    {refuse: "a pie element has \"\uFFFD\""},
}

// TestDecodeChart runs the seed corpus of FuzzDecodeChart with each
// seed's expected outcome.
func TestDecodeChart(t *testing.T) {
	seeds := readSeedCorpus(t, "FuzzDecodeChart")
	names := make([]string, 0, len(seeds))
	for name := range seeds {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			w, ok := chartSeeds[name]
			if !ok {
				t.Fatalf("seed %s has no expected outcome in this table", name)
			}
			c, _, err := decodeChart(seeds[name])
			switch {
			case w.refuse != "":
				if !errors.Is(err, errChart) || !strings.Contains(err.Error(), w.refuse) {
					t.Fatalf("err = %v, want a refusal saying %q", err, w.refuse)
				}
			case err != nil:
				t.Fatalf("err = %v, want a %s chart", err, w.typ)
			case c.Type != w.typ:
				t.Fatalf("type %q, want %q", c.Type, w.typ)
			case w.check != nil:
				w.check(t, c)
			}
			checkDecodeChart(t, seeds[name])
		})
	}
	for name := range chartSeeds {
		if _, ok := seeds[name]; !ok {
			t.Errorf("case %s has no seed file in testdata/fuzz/FuzzDecodeChart", name)
		}
	}
}

// checkDecodeChart holds for any input: a chart that decodes is within
// every cap, valid UTF-8, and decodes again to itself from its encoding.
func checkDecodeChart(t *testing.T, data []byte) {
	t.Helper()
	if !json.Valid(data) {
		return // a frame is checked whole before any field is looked at
	}
	obj, err := validObject(data)
	raw := data
	if err == nil {
		raw = obj
	}
	c, size, err := decodeChart(raw)
	if err != nil {
		if !errors.Is(err, errChart) {
			t.Fatalf("error %v is not errChart", err)
		}
		if r := refusedChart(err); len(r.Reason) > noteBytes || !utf8.ValidString(r.Reason) {
			t.Fatalf("refusal reason of %d bytes", len(r.Reason))
		}
		return
	}
	enc, err := json.Marshal(c)
	if err != nil || len(enc) != size || size > maxChartJSON {
		t.Fatalf("encoded %d bytes (%v), reported %d, cap %d", len(enc), err, size, maxChartJSON)
	}
	numbers, elements := chartCounts(t, c, 0)
	if numbers > maxChartNumbers || elements > maxChartElements+maxChartSubplots {
		t.Fatalf("%d numbers, %d elements: over the caps", numbers, elements)
	}
	again, size2, err := decodeChart(enc)
	if err != nil || size2 != size || !reflect.DeepEqual(again, c) {
		t.Fatalf("re-decoding %s: %+v, %v", enc, again, err)
	}
}

// chartCounts checks one chart's fields and counts its numbers and elements.
func chartCounts(t *testing.T, c *Chart, depth int) (numbers, elements int) {
	t.Helper()
	if _, ok := chartTypes[c.Type]; !ok || (c.Type == "superchart" && depth > 0) || c.Elements == nil {
		t.Fatalf("chart of type %q at depth %d, elements %v", c.Type, depth, c.Elements)
	}
	for _, s := range append([]string{c.Title, c.XLabel, c.YLabel, c.XUnit, c.YUnit, c.XScale, c.YScale, c.Orientation, c.Reason},
		append(c.XTickLabels, c.YTickLabels...)...) {
		if !utf8.ValidString(s) || len(s) > maxChartText {
			t.Fatalf("text %q", s)
		}
	}
	numbers = len(c.XTicks) + len(c.YTicks)
	elements = len(c.Elements)
	for _, e := range c.Elements {
		if (e.Chart != nil) != (c.Type == "superchart") {
			t.Fatalf("element %+v of a %s chart", e, c.Type)
		}
		if e.Chart != nil {
			n, m := chartCounts(t, e.Chart, depth+1)
			numbers, elements = numbers+n, elements+m
			continue
		}
		if len(e.Points) > maxChartPoints || len(e.Edges) > maxChartPoints+1 {
			t.Fatalf("element of %d points, %d edges", len(e.Points), len(e.Edges))
		}
		numbers += 2*len(e.Points) + len(e.Edges) + len(e.Counts) + len(e.Outliers)
		for _, p := range []*float64{e.Value, e.Angle, e.Radius, e.Min, e.FirstQuartile, e.Median, e.ThirdQuartile, e.Max} {
			if p != nil {
				numbers++
			}
		}
	}
	return numbers, elements
}

func FuzzDecodeChart(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeChart(t, data)
	})
}

// TestHostileForgedChart forges display items whose charts break the caps
// or the shape, over a real socket, both as display frames and in the
// result's list. Each is refused cleanly: the item stays, PNG only, with
// a chart of type "unknown" saying why; the connection runs the next cell.
func TestHostileForgedChart(t *testing.T) {
	item := func(chart string) string {
		return `{"mime":"image/png","data":"iVBORw0KGgo=","bundle":{"image/png":"iVBORw0KGgo="},"chart":` + chart + `}`
	}
	points := func(n int) string { return "[" + repeatJoin("[1e20,-1e-300]", n) + "]" }
	long := strings.Repeat("x", maxChartText)
	cases := []struct {
		name, chart, refuse string
	}{
		{"points over the cap", `{"type":"line","title":"","elements":[{"label":"","points":` + points(maxChartPoints+1) + `}]}`, "has 5001 entries, limit 5000"},
		{"numbers over the cap", `{"type":"line","title":"","elements":[` + repeatJoin(`{"label":"","points":`+points(maxChartPoints)+`}`, 7) + `]}`, "over 60000 numbers"},
		{"element flood", `{"type":"bar","title":"","elements":[` + repeatJoin(`{}`, 1_000_000) + `]}`, "1000000 elements in a bar chart"},
		{"subplot flood", `{"type":"superchart","title":"","elements":[` + repeatJoin(`{"type":"unknown","title":""}`, 17) + `]}`, "17 elements in a superchart"},
		{"elements spread over subplots", `{"type":"superchart","title":"","elements":[` + repeatJoin(`{"type":"bar","title":"","elements":[`+repeatJoin(`{"value":1}`, 100)+`]}`, 12) + `]}`, "elements in a bar chart, at most"},
		{"nesting", strings.Repeat(`{"type":"superchart","title":"","elements":[`, 1000) + strings.Repeat(`]}`, 1000), "a superchart inside a superchart"},
		{"encoded size", `{"type":"bar","title":"","x_tick_labels":[` + repeatJoin(`"`+long+`"`, 100) + `],"elements":[` + repeatJoin(`{"label":"`+long+`","group":"`+long+`","value":1}`, 1000) + `]}`, "bytes encoded, limit 2097152"},
		{"long title", `{"type":"pie","title":"` + long + `y","elements":[]}`, `"title" is over 1024 bytes`},
		{"not an object", `"a chart"`, "not an object"},
		{"infinite", `{"type":"scatter","title":"","elements":[{"points":[[1,-1e400]]}]}`, "not a finite number"},
	}
	good := `{"type":"bar","title":"ok","elements":[{"label":"a","group":"","value":3}]}`
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			frames := [][]byte{
				rawFrame([]byte(`{"t":"display","id":"c1","item":` + item(tc.chart) + `}`)),
				rawFrame([]byte(`{"t":"result","id":"c1","status":"ok","display":[` + item(tc.chart) + `,` + item(good) + `]}`)),
			}
			c := socketConn(t, func(n int) [][]byte {
				if n == 0 {
					return frames
				}
				return [][]byte{rawFrame([]byte(`{"t":"result","id":"c2","status":"ok","value":{"text/plain":"fine"}}`))}
			})
			defer c.Close()
			var shown []DisplayItem
			r, err := c.Exec(ExecRequest{ID: "c1", Code: "x", MaxOutput: 1 << 10, OnDisplay: func(d DisplayItem) { shown = append(shown, d) }}, nil)
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if len(shown) != 1 || len(r.Display) != 2 {
				t.Fatalf("%d items shown, %d in the result; want 1 and 2", len(shown), len(r.Display))
			}
			for i, d := range []DisplayItem{shown[0], r.Display[0]} {
				if d.MIME != "image/png" || d.Data != "iVBORw0KGgo=" || d.Chart == nil || d.Chart.Type != "unknown" ||
					len(d.Chart.Elements) != 0 || !strings.Contains(d.Chart.Reason, "the host refused the chart data") ||
					!strings.Contains(d.Chart.Reason, tc.refuse) {
					t.Errorf("item %d: %s, chart %+v; want the PNG and a refusal saying %q", i, d.MIME, d.Chart, tc.refuse)
				}
			}
			if g := r.Display[1].Chart; g == nil || g.Type != "bar" || g.Title != "ok" || *g.Elements[0].Value != 3 {
				t.Errorf("the valid chart after it: %+v", g)
			}
			if enc, _ := json.Marshal(r); int64(len(enc)) > MaxResultJSON(1<<10) {
				t.Errorf("result of %d bytes, over MaxResultJSON", len(enc))
			}
			if r2, err := c.Exec(ExecRequest{ID: "c2", Code: "y", MaxOutput: 1 << 10}, nil); err != nil || r2.Value["text/plain"] != "fine" {
				t.Errorf("next cell: %+v, %v", r2, err)
			}
		})
	}
}

// TestHostileForgedValueChart: the value's chart is held to the same rules
// and the same rich budget as a display item's.
func TestHostileForgedValueChart(t *testing.T) {
	good := `{"type":"pie","title":"v","elements":[{"label":"a","angle":360,"radius":1}]}`
	cases := []struct {
		name, rest string
		check      func(t *testing.T, r *Result)
	}{
		{"valid", `"value":{"text/plain":"<Figure>"},"value_chart":` + good, func(t *testing.T, r *Result) {
			if c := r.ValueChart; c == nil || c.Type != "pie" || *c.Elements[0].Angle != 360 {
				t.Errorf("value chart %+v", c)
			}
		}},
		{"malformed", `"value":{"text/plain":"<Figure>"},"value_chart":{"type":"pie","elements":[{"points":[]}]}`, func(t *testing.T, r *Result) {
			if c := r.ValueChart; c == nil || c.Type != "unknown" || !strings.Contains(c.Reason, `a pie element has "points"`) {
				t.Errorf("value chart %+v", c)
			}
		}},
		{"without a value", `"value_chart":` + good, func(t *testing.T, r *Result) {
			if r.ValueChart != nil {
				t.Errorf("a chart with no value: %+v", r.ValueChart)
			}
		}},
		{"past the rich budget", `"value":{"text/plain":"` + strings.Repeat("v", maxRichBytes-100) + `"},"value_chart":` + good, func(t *testing.T, r *Result) {
			if r.ValueChart != nil {
				t.Errorf("a chart past the budget: %+v", r.ValueChart)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := socketConn(t, func(int) [][]byte {
				return [][]byte{rawFrame([]byte(`{"t":"result","id":"c1","status":"ok",` + tc.rest + `}`))}
			})
			defer c.Close()
			r, err := c.Exec(ExecRequest{ID: "c1", Code: "x", MaxOutput: 1 << 10}, nil)
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			tc.check(t, r)
			if enc, _ := json.Marshal(r); int64(len(enc)) > MaxResultJSON(1<<10) {
				t.Errorf("result of %d bytes, over MaxResultJSON", len(enc))
			}
		})
	}
}

// A chart counts against the result's rich budget like the rest of its item.
func TestChartCharged(t *testing.T) {
	chart := `{"type":"scatter","title":"","elements":[{"label":"","points":[` + repeatJoin("[1,2]", maxChartPoints) + `]}]}`
	raw := []byte(`{"mime":"image/png","data":"","chart":` + chart + `}`)
	item, cost, err := decodeItem(raw, 1<<20)
	if err != nil || item.Chart == nil || len(item.Chart.Elements[0].Points) != maxChartPoints {
		t.Fatalf("decodeItem: %+v, %v", item.Chart, err)
	}
	enc, _ := json.Marshal(item)
	if cost < len(enc) {
		t.Errorf("charged %d bytes for an item of %d", cost, len(enc))
	}
	if _, cost, _ := decodeItem(raw, len(enc)-100); cost != 0 {
		t.Errorf("an item over the budget was kept, charged %d", cost)
	}
}

// TestChartChargedAtItsMemory: a chart is charged at what it takes in the
// host's memory where that is more than its JSON (1000 empty elements are
// 3 KB of JSON and 200 KB of elements: 1000 such items held 192 MiB for
// one 3 MB result), and an item with no MIME type, dropped by every
// caller, has its chart never decoded.
func TestChartChargedAtItsMemory(t *testing.T) {
	chart := `{"type":"line","elements":[` + repeatJoin("{}", maxChartElements) + `]}`
	item, cost, err := decodeItem([]byte(`{"mime":"image/png","data":"","chart":`+chart+`}`), maxRichBytes)
	if err != nil || item.Chart == nil || len(item.Chart.Elements) != maxChartElements {
		t.Fatalf("decodeItem: %v, %v", item.Chart, err)
	}
	if mem := maxChartElements * int(unsafe.Sizeof(ChartElement{})); cost < mem {
		t.Errorf("charged %d bytes for a chart of %d bytes of elements", cost, mem)
	}
	raw := []byte(`{"data":"","chart":{"type":"bogus"}}`)
	item, _, err = decodeItem(raw, maxRichBytes)
	if err != nil || item.Chart != nil {
		t.Errorf("an item with no MIME type had its chart decoded: %+v, %v", item.Chart, err)
	}
	// Dropped items count: after the cap of them, a renderable one is not
	// passed on either.
	s := newExecState(ExecRequest{ID: "c1"}, nil)
	for range maxDisplayItems {
		if _, err := s.handle([]byte(`{"t":"display","id":"c1","item":{"data":"","chart":` + chart + `}}`)); err != nil {
			t.Fatal(err)
		}
	}
	shown := 0
	s.req.OnDisplay = func(DisplayItem) { shown++ }
	if _, err := s.handle([]byte(`{"t":"display","id":"c1","item":{"mime":"text/plain","data":"x"}}`)); err != nil {
		t.Fatal(err)
	}
	if shown != 0 {
		t.Errorf("an item was passed on after %d dropped ones: dropped items do not count", maxDisplayItems)
	}
}
