package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unsafe"
)

// Chart is the data of a matplotlib figure, read by the kernel from the
// Figure's artists and carried beside its PNG, so that a model can read the
// numbers it drew. Field names follow E2B's code-interpreter charts.
//
// Type says which fields the elements use:
//   - "line", "scatter": Label and Points ([x, y] in data coordinates; on a
//     "datetime" axis x is a matplotlib date number, days since 1970-01-01;
//     on a "categorical" one, the category's index, named by the ticks).
//   - "bar": Label (the category), Group (the series' legend label) and
//     Value (the bar's height, or width when Orientation is "horizontal").
//   - "pie": Label, Angle (degrees; the share of the pie is Angle/360) and
//     Radius.
//   - "histogram": Label, Edges (bin edges, one more than counts) and
//     Counts (as hist() returned them: densities with density=True,
//     cumulative when Stacked).
//   - "box_and_whisker": Label, Min and Max (the whiskers' ends),
//     FirstQuartile, Median, ThirdQuartile and Outliers (the fliers drawn).
//   - "superchart": a figure of several subplots; each element is the
//     Chart of one subplot (never a superchart itself).
//   - "unknown": the figure is PNG only; Reason says why, Elements is
//     empty.
//
// It comes out of the sandbox: decodeChart validates every field, within
// the caps below, before it goes on.
type Chart struct {
	Type        string    `json:"type"`
	Title       string    `json:"title"`
	XLabel      string    `json:"x_label,omitempty"`
	YLabel      string    `json:"y_label,omitempty"`
	XUnit       string    `json:"x_unit,omitempty"`
	YUnit       string    `json:"y_unit,omitempty"`
	XScale      string    `json:"x_scale,omitempty"`
	YScale      string    `json:"y_scale,omitempty"`
	XTicks      []float64 `json:"x_ticks,omitempty"`
	XTickLabels []string  `json:"x_tick_labels,omitempty"`
	YTicks      []float64 `json:"y_ticks,omitempty"`
	YTickLabels []string  `json:"y_tick_labels,omitempty"`
	// Orientation is "vertical" or "horizontal" for bars and histograms.
	Orientation string `json:"orientation,omitempty"`
	// Stacked marks stacked bars or histograms.
	Stacked  bool           `json:"stacked,omitempty"`
	Elements []ChartElement `json:"elements"`
	// Truncated says points, elements or subplots were left out: past
	// 5000 points a series, 40000 numbers or 1000 elements a figure, or
	// 16 subplots.
	Truncated bool `json:"truncated,omitempty"`
	// Reason says why a chart is "unknown".
	Reason string `json:"reason,omitempty"`
}

// ChartElement is one series, bar, wedge or histogram of a Chart (which
// fields are set depends on the chart's Type), or, in a superchart, the
// Chart of one subplot, whose fields it then carries inline.
type ChartElement struct {
	Label  string       `json:"label,omitempty"`
	Group  string       `json:"group,omitempty"`
	Value  *float64     `json:"value,omitempty"`
	Points [][2]float64 `json:"points,omitempty"`
	Angle  *float64     `json:"angle,omitempty"`
	Radius *float64     `json:"radius,omitempty"`
	Edges  []float64    `json:"edges,omitempty"`
	Counts []float64    `json:"counts,omitempty"`
	// A box_and_whisker element's statistics, as E2B names them.
	Min           *float64  `json:"min,omitempty"`
	FirstQuartile *float64  `json:"first_quartile,omitempty"`
	Median        *float64  `json:"median,omitempty"`
	ThirdQuartile *float64  `json:"third_quartile,omitempty"`
	Max           *float64  `json:"max,omitempty"`
	Outliers      []float64 `json:"outliers,omitempty"`
	*Chart
}

// Caps of one chart, at or above what the kernel sends (the CHART_*
// of jailcell_kernel/charts.py). A chart past them is refused, never cut: what is kept must be
// what the figure drew.
const (
	maxChartJSON     = 2 << 20 // its JSON as the API encodes it
	maxChartElements = 1000    // elements of a figure, subplots' included
	maxChartPoints   = 5000    // points of a series, bins of a histogram
	maxChartNumbers  = 60000   // numbers of a figure: coordinates, values, ticks
	maxChartSubplots = 16
	maxChartTicks    = 100
	maxChartText     = 1 << 10 // bytes of a title, label, unit or tick label
	maxChartWord     = 32      // bytes of a scale name
)

// chartTypes are the types a chart may have; the value says whether its
// elements may be charts.
var chartTypes = map[string]bool{"line": false, "scatter": false, "bar": false, "pie": false,
	"histogram": false, "box_and_whisker": false, "superchart": true, "unknown": false}

// errChart marks a chart the host refused.
var errChart = errors.New("invalid chart")

// chartBudget is what the rest of one chart may still hold.
type chartBudget struct{ elements, numbers int }

// refusedChart stands in for a chart the host would not pass on: the PNG
// is all there is, and the reason says why.
func refusedChart(err error) *Chart {
	reason := "the host refused the chart data: " + err.Error()
	if len(reason) > noteBytes-64 {
		reason = strings.ToValidUTF8(reason[:noteBytes-64], "")
	}
	return &Chart{Type: "unknown", Elements: []ChartElement{}, Reason: reason}
}

// decodeChart decodes the raw JSON value of a display item's "chart"
// (from a valid frame), validating its shape and bounds field by field as
// decodeItem does, and returns it with its encoded size. Any violation is
// an error naming it.
func decodeChart(raw []byte) (*Chart, int, error) {
	if kind(raw) != '{' {
		return nil, 0, fmt.Errorf("%w: not an object", errChart)
	}
	b := &chartBudget{elements: maxChartElements, numbers: maxChartNumbers}
	c, err := decodeChartObject(raw, b, 0)
	if err != nil {
		return nil, 0, err
	}
	enc, err := json.Marshal(c)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: encode: %v", errChart, err)
	}
	if len(enc) > maxChartJSON {
		return nil, 0, fmt.Errorf("%w: %d bytes encoded, limit %d", errChart, len(enc), maxChartJSON)
	}
	return c, len(enc), nil
}

func decodeChartObject(obj []byte, b *chartBudget, depth int) (*Chart, error) {
	c := &Chart{}
	var elements []byte
	var typ []byte
	err := eachMember(obj, func(k, v []byte) error {
		var dst *string
		limit := maxChartText
		switch string(k) {
		case `"type"`:
			typ = v
			return nil
		case `"elements"`:
			elements = v
			return nil
		case `"title"`:
			dst = &c.Title
		case `"x_label"`:
			dst = &c.XLabel
		case `"y_label"`:
			dst = &c.YLabel
		case `"x_unit"`:
			dst = &c.XUnit
		case `"y_unit"`:
			dst = &c.YUnit
		case `"reason"`:
			dst = &c.Reason
		case `"x_scale"`:
			dst, limit = &c.XScale, maxChartWord
		case `"y_scale"`:
			dst, limit = &c.YScale, maxChartWord
		case `"orientation"`:
			if !stringIs(v, "vertical") && !stringIs(v, "horizontal") && kind(v) != 'n' {
				return fmt.Errorf("%w: orientation is not \"vertical\" or \"horizontal\"", errChart)
			}
			dst, limit = &c.Orientation, maxChartWord
		case `"stacked"`:
			return chartBool(&c.Stacked, k, v)
		case `"truncated"`:
			return chartBool(&c.Truncated, k, v)
		case `"x_ticks"`:
			return chartNumbers(&c.XTicks, k, v, maxChartTicks, b)
		case `"y_ticks"`:
			return chartNumbers(&c.YTicks, k, v, maxChartTicks, b)
		case `"x_tick_labels"`:
			return chartStrings(&c.XTickLabels, k, v, maxChartTicks)
		case `"y_tick_labels"`:
			return chartStrings(&c.YTickLabels, k, v, maxChartTicks)
		default:
			return nil // a field this host does not know is left out
		}
		return chartString(dst, k, v, limit)
	})
	if err != nil {
		return nil, err
	}
	if kind(typ) != '"' {
		return nil, fmt.Errorf("%w: type is missing or not a string", errChart)
	}
	t, _, _ := unquote(typ, maxChartWord)
	nested, ok := chartTypes[t]
	if !ok {
		return nil, fmt.Errorf("%w: type %q is not one of line, scatter, bar, pie, histogram, box_and_whisker, superchart, unknown", errChart, t)
	}
	if nested && depth > 0 {
		return nil, fmt.Errorf("%w: a superchart inside a superchart", errChart)
	}
	c.Type = t
	c.Elements = []ChartElement{}
	switch kind(elements) {
	case 0, 'n':
		return c, nil
	case '[':
	default:
		return nil, fmt.Errorf("%w: elements is not a list", errChart)
	}
	n := countElements(elements)
	limit := b.elements
	if nested {
		limit = min(limit, maxChartSubplots)
	}
	if t == "unknown" {
		limit = 0
	}
	if n > limit {
		return nil, fmt.Errorf("%w: %d elements in a %s chart, at most %d left", errChart, n, t, limit)
	}
	b.elements -= n
	c.Elements = make([]ChartElement, 0, n)
	eachElement(elements, func(v []byte) bool {
		if kind(v) != '{' {
			err = fmt.Errorf("%w: an element is not an object", errChart)
			return false
		}
		var e ChartElement
		if nested {
			e.Chart, err = decodeChartObject(v, b, depth+1)
		} else {
			err = decodeChartElement(&e, v, t, b)
		}
		c.Elements = append(c.Elements, e)
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// decodeChartElement decodes the fields an element of a t chart may have;
// others are an error.
func decodeChartElement(e *ChartElement, obj []byte, t string, b *chartBudget) error {
	allowed := map[string][]string{
		"line":            {"label", "points"},
		"scatter":         {"label", "points"},
		"bar":             {"label", "group", "value"},
		"pie":             {"label", "angle", "radius"},
		"histogram":       {"label", "edges", "counts"},
		"box_and_whisker": {"label", "min", "first_quartile", "median", "third_quartile", "max", "outliers"},
	}[t]
	err := eachMember(obj, func(k, v []byte) error {
		name, _, _ := unquote(k, maxChartWord)
		ok := false
		for _, a := range allowed {
			ok = ok || a == name
		}
		if !ok {
			return fmt.Errorf("%w: a %s element has %q", errChart, t, name)
		}
		switch name {
		case "label":
			return chartString(&e.Label, k, v, maxChartText)
		case "group":
			return chartString(&e.Group, k, v, maxChartText)
		case "value":
			return chartNumber(&e.Value, k, v, b)
		case "angle":
			return chartNumber(&e.Angle, k, v, b)
		case "radius":
			return chartNumber(&e.Radius, k, v, b)
		case "edges":
			return chartNumbers(&e.Edges, k, v, maxChartPoints+1, b)
		case "counts":
			return chartNumbers(&e.Counts, k, v, maxChartPoints, b)
		case "min":
			return chartNumber(&e.Min, k, v, b)
		case "first_quartile":
			return chartNumber(&e.FirstQuartile, k, v, b)
		case "median":
			return chartNumber(&e.Median, k, v, b)
		case "third_quartile":
			return chartNumber(&e.ThirdQuartile, k, v, b)
		case "max":
			return chartNumber(&e.Max, k, v, b)
		case "outliers":
			return chartNumbers(&e.Outliers, k, v, maxChartPoints, b)
		case "points":
			return chartPoints(&e.Points, k, v, b)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if t == "histogram" && len(e.Counts) > 0 && len(e.Edges) != len(e.Counts)+1 {
		return fmt.Errorf("%w: a histogram with %d edges for %d counts", errChart, len(e.Edges), len(e.Counts))
	}
	return nil
}

func chartString(dst *string, k, v []byte, limit int) error {
	switch kind(v) {
	case 'n':
		return nil
	case '"':
	default:
		return fmt.Errorf("%w: %s is not a string", errChart, k)
	}
	s, _, cut := unquote(v, limit)
	if cut {
		return fmt.Errorf("%w: %s is over %d bytes", errChart, k, limit)
	}
	*dst = s
	return nil
}

func chartBool(dst *bool, k, v []byte) error {
	if err := boolField(dst, k, v); err != nil {
		return fmt.Errorf("%w: %s is not a boolean", errChart, k)
	}
	return nil
}

// chartFloat parses a JSON number as a finite float64 ("1e999" is not).
func chartFloat(k, v []byte) (float64, error) {
	if kind(v) != '0' || len(v) > 64 {
		return 0, fmt.Errorf("%w: %s holds %.20q, not a number", errChart, k, v)
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%w: %s holds %.20q, not a finite number", errChart, k, v)
	}
	return f, nil
}

func chartNumber(dst **float64, k, v []byte, b *chartBudget) error {
	if b.numbers < 1 {
		return fmt.Errorf("%w: over %d numbers", errChart, maxChartNumbers)
	}
	b.numbers--
	f, err := chartFloat(k, v)
	if err != nil {
		return err
	}
	*dst = &f
	return nil
}

// chartList checks that v is a list of at most limit elements, each taking
// `each` of the budget's numbers, and counts it before anything is decoded.
func chartList(k, v []byte, limit, each int, b *chartBudget) (int, error) {
	if kind(v) != '[' {
		return 0, fmt.Errorf("%w: %s is not a list", errChart, k)
	}
	n := countElements(v)
	if n > limit {
		return 0, fmt.Errorf("%w: %s has %d entries, limit %d", errChart, k, n, limit)
	}
	if n*each > b.numbers {
		return 0, fmt.Errorf("%w: over %d numbers", errChart, maxChartNumbers)
	}
	b.numbers -= n * each
	return n, nil
}

func chartNumbers(dst *[]float64, k, v []byte, limit int, b *chartBudget) error {
	n, err := chartList(k, v, limit, 1, b)
	if err != nil {
		return err
	}
	out := make([]float64, 0, n)
	eachElement(v, func(x []byte) bool {
		var f float64
		f, err = chartFloat(k, x)
		out = append(out, f)
		return err == nil
	})
	if len(out) > 0 {
		*dst = out
	}
	return err
}

func chartStrings(dst *[]string, k, v []byte, limit int) error {
	if kind(v) != '[' {
		return fmt.Errorf("%w: %s is not a list", errChart, k)
	}
	n := countElements(v)
	if n > limit {
		return fmt.Errorf("%w: %s has %d entries, limit %d", errChart, k, n, limit)
	}
	out := make([]string, 0, n)
	var err error
	eachElement(v, func(x []byte) bool {
		var s string
		err = chartString(&s, k, x, maxChartText)
		out = append(out, s)
		return err == nil
	})
	if len(out) > 0 {
		*dst = out
	}
	return err
}

func chartPoints(dst *[][2]float64, k, v []byte, b *chartBudget) error {
	n, err := chartList(k, v, maxChartPoints, 2, b)
	if err != nil {
		return err
	}
	out := make([][2]float64, 0, n)
	eachElement(v, func(p []byte) bool {
		if kind(p) != '[' || countElements(p) != 2 {
			err = fmt.Errorf("%w: a point of %s is not [x, y]", errChart, k)
			return false
		}
		var xy [2]float64
		i := 0
		eachElement(p, func(x []byte) bool {
			xy[i], err = chartFloat(k, x)
			i++
			return err == nil
		})
		out = append(out, xy)
		return err == nil
	})
	if len(out) > 0 {
		*dst = out
	}
	return err
}

// chartMemory estimates what c takes in the host's memory: its elements
// and their numbers, and its nested charts'.
func chartMemory(c *Chart) int {
	if c == nil {
		return 0
	}
	n := int(unsafe.Sizeof(Chart{})) + 8*(len(c.XTicks)+len(c.YTicks))
	for _, labels := range [][]string{c.XTickLabels, c.YTickLabels} {
		for _, l := range labels {
			n += 16 + len(l)
		}
	}
	for i := range c.Elements {
		e := &c.Elements[i]
		n += int(unsafe.Sizeof(ChartElement{})) + len(e.Label) + len(e.Group)
		n += 16*len(e.Points) + 8*(len(e.Edges)+len(e.Counts)+len(e.Outliers))
		for _, p := range []*float64{e.Value, e.Angle, e.Radius, e.Min, e.FirstQuartile, e.Median, e.ThirdQuartile, e.Max} {
			if p != nil {
				n += 8
			}
		}
		n += chartMemory(e.Chart)
	}
	return n
}
