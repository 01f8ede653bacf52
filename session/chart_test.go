package session

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// figure runs code in the session and returns its one display item: a PNG
// with the chart beside it.
func (e *env) figure(t *testing.T, id, code string) DisplayItem {
	t.Helper()
	res := e.exec(t, id, code, 2*time.Minute)
	wantStatus(t, res, StatusOK)
	if len(res.Display) != 1 {
		t.Fatalf("%d display items, want 1: %+v", len(res.Display), res.Display)
	}
	d := res.Display[0]
	png, err := base64.StdEncoding.DecodeString(d.Data)
	if d.MIME != "image/png" || err != nil || !strings.HasPrefix(string(png), "\x89PNG\r\n\x1a\n") {
		t.Fatalf("display item %s is not a PNG (%v)", d.MIME, err)
	}
	if d.Chart == nil {
		t.Fatalf("no chart beside the PNG; stderr %q", res.Stderr)
	}
	return d
}

func fptr(v float64) *float64 { return &v }

// TestChartData draws each chart type in a real sandbox with the real
// rootfs's matplotlib and checks that the numbers, labels and title come
// back exactly, next to the PNG.
func TestChartData(t *testing.T) { chartData(t, nil, "") }

// TestChartDataZygote: a session forked from a zygote that imported pyplot
// before any cell has the kernel's show() and chart recorders all the same
// (the zygote runs the kernel's hooks before its preload).
func TestChartDataZygote(t *testing.T) { chartData(t, withZygotes, StartZygote) }

func chartData(t *testing.T, mod func(*Config), start string) {
	e := newEnv(t, func(c *Config) {
		p := c.Policies["default"]
		p.MemoryBytes = 512 << 20
		c.Policies["default"] = p
		if mod != nil {
			mod(c)
		}
	})
	if start == StartZygote {
		waitZygote(t, e.m)
	}
	id := e.create(t, CreateOptions{})
	if start != "" {
		if s, err := e.m.get(0, id); err != nil || s.info.Start != start {
			t.Fatalf("session started by %q, want %q (%v)", s.info.Start, start, err)
		}
	}
	wantStatus(t, e.exec(t, id, "import matplotlib.pyplot as plt\nimport numpy as np", 2*time.Minute), StatusOK)

	cases := []struct {
		name, code string
		want       *Chart // compared whole, after dropping ticks unless it has them
	}{
		{"line", `
fig, ax = plt.subplots()
ax.plot([0, 1, 2, 3], [1.5, -2.25, 4, 8], label="speed")
ax.plot([0, 3], [0, 1e-3], label="_hidden")
ax.set_title("Runs")
ax.set_xlabel("Time (s)")
ax.set_ylabel("Speed [m/s]")
ax.set_yscale("symlog")
plt.show()`, &Chart{Type: "line", Title: "Runs", XLabel: "Time (s)", YLabel: "Speed [m/s]", XUnit: "s", YUnit: "m/s",
			XScale: "linear", YScale: "symlog", Elements: []ChartElement{
				{Label: "speed", Points: [][2]float64{{0, 1.5}, {1, -2.25}, {2, 4}, {3, 8}}},
				{Points: [][2]float64{{0, 0}, {3, 1e-3}}},
			}}},
		{"scatter", `
plt.scatter([1, 2, 3], [3.5, 1, 2], label="obs")
plt.scatter([0.5], [0.25])
plt.title("Points")
plt.xlabel("x")
plt.ylabel("y")`, &Chart{Type: "scatter", Title: "Points", XLabel: "x", YLabel: "y", XScale: "linear", YScale: "linear",
			Elements: []ChartElement{
				{Label: "obs", Points: [][2]float64{{1, 3.5}, {2, 1}, {3, 2}}},
				{Points: [][2]float64{{0.5, 0.25}}},
			}}},
		{"vertical bar", `
plt.bar(["apples", "pears", "plums"], [3, 7.5, -1])
plt.title("Fruit")
plt.ylabel("kg")`, &Chart{Type: "bar", Title: "Fruit", YLabel: "kg", XScale: "categorical", YScale: "linear", Orientation: "vertical",
			Elements: []ChartElement{
				{Label: "apples", Value: fptr(3)}, {Label: "pears", Value: fptr(7.5)}, {Label: "plums", Value: fptr(-1)},
			}}},
		{"horizontal grouped bar", `
fig, ax = plt.subplots()
y = np.arange(2)
ax.barh(y - 0.2, [10, 20], height=0.4, label="2023")
ax.barh(y + 0.2, [15, 5], height=0.4, label="2024")
ax.set_yticks(y, ["north", "south"])
ax.set_title("Sales")
ax.set_xlabel("units")`, &Chart{Type: "bar", Title: "Sales", XLabel: "units", XScale: "linear", YScale: "linear", Orientation: "horizontal",
			Elements: []ChartElement{
				{Label: "north", Group: "2023", Value: fptr(10)}, {Label: "south", Group: "2023", Value: fptr(20)},
				{Label: "north", Group: "2024", Value: fptr(15)}, {Label: "south", Group: "2024", Value: fptr(5)},
			}}},
		{"stacked bar", `
plt.bar(["a", "b"], [1, 2], label="low")
plt.bar(["a", "b"], [3, 4], bottom=[1, 2], label="high")
plt.title("Stack")`, &Chart{Type: "bar", Title: "Stack", XScale: "categorical", YScale: "linear", Orientation: "vertical", Stacked: true,
			Elements: []ChartElement{
				{Label: "a", Group: "low", Value: fptr(1)}, {Label: "b", Group: "low", Value: fptr(2)},
				{Label: "a", Group: "high", Value: fptr(3)}, {Label: "b", Group: "high", Value: fptr(4)},
			}}},
		{"pie", `
plt.pie([1, 2, 1], labels=["red", "green", "blue"], autopct="%1.0f%%")
plt.title("Share")`, &Chart{Type: "pie", Title: "Share", Elements: []ChartElement{
			{Label: "red", Angle: fptr(90), Radius: fptr(1)}, {Label: "green", Angle: fptr(180), Radius: fptr(1)}, {Label: "blue", Angle: fptr(90), Radius: fptr(1)},
		}}},
		{"histogram", `
plt.hist([1, 2, 2, 3, 3, 3, 7], bins=[0, 2, 4, 8], label="waits")
plt.title("Waits")
plt.xlabel("Wait (min)")
plt.ylabel("count")`, &Chart{Type: "histogram", Title: "Waits", XLabel: "Wait (min)", YLabel: "count", XUnit: "min", XScale: "linear", YScale: "linear",
			Elements: []ChartElement{{Label: "waits", Edges: []float64{0, 2, 4, 8}, Counts: []float64{1, 5, 1}}}}},
		{"two histograms", `
plt.hist([[1, 1, 2], [2, 3]], bins=2, label=["a", "b"])`, &Chart{Type: "histogram", XScale: "linear", YScale: "linear",
			Elements: []ChartElement{
				{Label: "a", Edges: []float64{1, 2, 3}, Counts: []float64{2, 1}},
				{Label: "b", Edges: []float64{1, 2, 3}, Counts: []float64{0, 2}},
			}}},
		{"box plot", `
plt.boxplot([[1, 2, 3, 4, 5], [1, 2, 3, 4, 100]], labels=["even", "skewed"])
plt.title("Spread")
plt.ylabel("ms")`, &Chart{Type: "box_and_whisker", Title: "Spread", YLabel: "ms", XScale: "linear", YScale: "linear",
			Elements: []ChartElement{
				{Label: "even", Min: fptr(1), FirstQuartile: fptr(2), Median: fptr(3), ThirdQuartile: fptr(4), Max: fptr(5)},
				{Label: "skewed", Min: fptr(1), FirstQuartile: fptr(2), Median: fptr(3), ThirdQuartile: fptr(4), Max: fptr(4), Outliers: []float64{100}},
			}}},
		{"subplots", `
fig, (a, b) = plt.subplots(1, 2)
a.plot([1, 2], [3, 4])
a.set_title("left")
b.imshow(np.eye(3))
fig.suptitle("Both")`, &Chart{Type: "superchart", Title: "Both", Elements: []ChartElement{
			{Chart: &Chart{Type: "line", Title: "left", XScale: "linear", YScale: "linear", Elements: []ChartElement{{Points: [][2]float64{{1, 3}, {2, 4}}}}}},
			{Chart: &Chart{Type: "unknown", Reason: "an image (imshow, matshow, spy)", Elements: []ChartElement{}}},
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := e.figure(t, id, tc.code).Chart
			withoutTicks(got)
			if !reflect.DeepEqual(got, tc.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tc.want)
				t.Errorf("chart\n got %s\nwant %s", g, w)
			}
		})
	}

	t.Run("ticks", func(t *testing.T) {
		c := e.figure(t, id, "plt.plot([0, 10], [0, 1])\nplt.xticks([0, 5, 10], ['start', 'middle', 'end'])").Chart
		if !reflect.DeepEqual(c.XTicks, []float64{0, 5, 10}) || !reflect.DeepEqual(c.XTickLabels, []string{"start", "middle", "end"}) {
			t.Errorf("x ticks %v %q", c.XTicks, c.XTickLabels)
		}
		if len(c.YTicks) == 0 || len(c.YTicks) != len(c.YTickLabels) {
			t.Errorf("y ticks %v %q", c.YTicks, c.YTickLabels)
		}
	})
	t.Run("a figure as the cell's value", func(t *testing.T) {
		res := e.exec(t, id, "fig, ax = plt.subplots()\nax.bar(['x', 'y'], [1, 2])\nax.set_title('Value')\nfig", 2*time.Minute)
		wantStatus(t, res, StatusOK)
		png, _ := res.Value["image/png"].(string)
		c := res.ValueChart
		if png == "" || len(res.Display) != 0 || c == nil || c.Type != "bar" || c.Title != "Value" || len(c.Elements) != 2 || *c.Elements[1].Value != 2 || c.Elements[1].Label != "y" {
			t.Errorf("value png %d bytes, %d display items, value chart %+v", len(png), len(res.Display), c)
		}
		if res := e.exec(t, id, "41 + 1", time.Minute); res.ValueChart != nil {
			t.Errorf("a value that is not a figure has a chart: %+v", res.ValueChart)
		}
	})
	t.Run("a cleared histogram is forgotten", func(t *testing.T) {
		c := e.figure(t, id, "fig, ax = plt.subplots()\nax.hist([1, 2])\nax.cla()\nax.plot([5, 6])").Chart
		if c.Type != "line" || len(c.Elements) != 1 || !reflect.DeepEqual(c.Elements[0].Points, [][2]float64{{0, 5}, {1, 6}}) {
			t.Errorf("chart %+v", c)
		}
	})
	t.Run("a long series is cut and says so", func(t *testing.T) {
		c := e.figure(t, id, "plt.plot(np.arange(6000.0))").Chart
		if !c.Truncated || len(c.Elements) != 1 || len(c.Elements[0].Points) != 5000 || c.Elements[0].Points[4999] != [2]float64{4999, 4999} {
			t.Errorf("truncated %v, %d points", c.Truncated, len(c.Elements[0].Points))
		}
	})
}

// withoutTicks clears the tick fields, which depend on matplotlib's
// locators: cases compare the data.
func withoutTicks(c *Chart) {
	c.XTicks, c.XTickLabels, c.YTicks, c.YTickLabels = nil, nil, nil, nil
	for _, e := range c.Elements {
		if e.Chart != nil {
			withoutTicks(e.Chart)
		}
	}
}

// TestChartFallback: what the kernel cannot read faithfully is "unknown"
// with a reason, PNG only; an error while reading a figure never fails the
// cell; a chart the cell forges (past the caps, or of a wrong shape) is
// refused by the host with the reason in its place, and the session goes on.
func TestChartFallback(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		p := c.Policies["default"]
		p.MemoryBytes = 512 << 20
		c.Policies["default"] = p
	})
	id := e.create(t, CreateOptions{})
	wantStatus(t, e.exec(t, id, "import matplotlib.pyplot as plt\nimport numpy as np", 2*time.Minute), StatusOK)
	for _, tc := range []struct{ name, code, reason string }{
		{"image", "plt.imshow(np.eye(4))", "an image"},
		{"3-D", "plt.figure().add_subplot(projection='3d').plot([1, 2], [3, 4], [5, 6])", "3d axes"},
		{"contour", "plt.contourf(np.eye(4))", "contour, mesh, fill or error bars"},
		{"mixed", "plt.plot([1, 2])\nplt.scatter([1], [2])", "mixed line and scatter in one axes"},
		{"extraction error", "fig, ax = plt.subplots()\nax.plot([1, 2])\nax.get_title = lambda *a, **k: 1 / 0", "cannot read this figure: ZeroDivisionError"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.figure(t, id, tc.code).Chart
			if c.Type != "unknown" || len(c.Elements) != 0 || !strings.Contains(c.Reason, tc.reason) {
				t.Errorf("chart %+v, want unknown saying %q", c, tc.reason)
			}
		})
	}
	// The cell swaps the kernel's chart reader (as its display module
	// calls it) for one that forges.
	forge := "import sys\n_k = sys.modules['jailcell_kernel.display']\n_real = _k._chart_of\n_k._chart_of = lambda fig: "
	for _, tc := range []struct{ name, chart, reason string }{
		{"over the caps", "{'type': 'line', 'title': '', 'elements': [{'label': '', 'points': [[1, 2]] * 5000}] * 7}", "over 60000 numbers"},
		{"wrong type", "{'type': 'sankey', 'title': '', 'elements': []}", `type "sankey" is not one of`},
		{"wrong shape", "{'type': 'bar', 'title': '', 'elements': [{'label': 'a', 'value': '3'}]}", "not a number"},
		{"not an object", "'chart'", "not an object"},
	} {
		t.Run("forged "+tc.name, func(t *testing.T) {
			d := e.figure(t, id, forge+tc.chart+"\nplt.plot([1, 2])")
			if d.Chart.Type != "unknown" || !strings.Contains(d.Chart.Reason, "the host refused the chart data") || !strings.Contains(d.Chart.Reason, tc.reason) {
				t.Errorf("chart %+v, want a refusal saying %q", d.Chart, tc.reason)
			}
			c := e.figure(t, id, "_k._chart_of = _real\nplt.bar(['x'], [2])").Chart
			if c.Type != "bar" || *c.Elements[0].Value != 2 {
				t.Errorf("next figure: %+v", c)
			}
		})
	}
}

// TestDataFrameTable: a pandas DataFrame, as a cell's value or displayed,
// comes with its columns as a table beside its bundle (E2B's Result.data),
// in column order, NaN as null and timestamps in ISO form; a frame over
// 10000 cells has none (its bundle still has the head). The bundle itself
// is Jupyter's: no extra MIME type.
func TestDataFrameTable(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, CreateOptions{})
	res := e.exec(t, id, `import pandas as pd, numpy as np
df = pd.DataFrame({"b": [1, 2], "a": ["x", None], "f": [0.5, np.nan], "t": pd.to_datetime(["2023-09-01", "2023-09-02"])})
display(df)
df`, 2*time.Minute)
	wantStatus(t, res, StatusOK)
	want := `{"b":[1,2],"a":["x",null],"f":[0.5,null],"t":["2023-09-01T00:00:00","2023-09-02T00:00:00"]}`
	if string(res.ValueTable) != want {
		t.Errorf("value table = %s, want %s", res.ValueTable, want)
	}
	if len(res.Display) != 1 || string(res.Display[0].Table) != want {
		t.Errorf("displayed: %+v, want the same table", res.Display)
	}
	if _, ok := res.Value["e2b/data"]; ok || res.Value["text/html"] == nil {
		t.Errorf("value bundle %v: want Jupyter's (html and text), no e2b/data", res.Value)
	}
	big := e.exec(t, id, "pd.DataFrame({'x': range(10001)})", time.Minute)
	if big.ValueTable != nil || big.Value["text/plain"] == nil {
		t.Errorf("a frame of 10001 cells: table %s, bundle %v; want no table, the bundle kept", big.ValueTable, big.Value)
	}
	plain := e.exec(t, id, "[1, 2]", time.Minute)
	if plain.ValueTable != nil {
		t.Errorf("a list: table %s, want none", plain.ValueTable)
	}
}
