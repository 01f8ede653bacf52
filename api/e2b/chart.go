package e2b

import (
	"math"
	"time"

	"github.com/jailcell/jailcell/session/seam"
)

// e2bChart is a chart as E2B's code interpreter sends it (its
// e2b_charts models dumped whole): every field of the chart's type is
// present, null when the figure has none (an empty title or label is
// null, not ""), and a datetime axis carries ISO dates where jailcell's
// own chart carries matplotlib day numbers. The SDKs and E2B's tests read
// these exact shapes (`chart.x_unit === null`, a string tick on a
// datetime axis). jailcell's "histogram" type, which E2B does not have,
// keeps its own elements with the 2-D fields; `truncated` and `reason`,
// which E2B does not have either, are added only when set.
func e2bChart(c *seam.Chart) map[string]any {
	if c == nil {
		return nil
	}
	out := map[string]any{"type": c.Type, "title": orNull(c.Title)}
	if c.Truncated {
		out["truncated"] = true
	}
	if c.Reason != "" {
		out["reason"] = c.Reason
	}
	elements := []any{}
	switch c.Type {
	case "superchart":
		// E2B's superchart title is the figure's suptitle as matplotlib
		// returns it: "" when there is none.
		out["title"] = c.Title
		for i := range c.Elements {
			if sub := c.Elements[i].Chart; sub != nil {
				elements = append(elements, e2bChart(sub))
			}
		}
	case "line", "scatter":
		planar(out, c)
		xDate := c.XScale == "datetime"
		yDate := c.YScale == "datetime"
		out["x_scale"], out["y_scale"] = orDefault(c.XScale, "linear"), orDefault(c.YScale, "linear")
		out["x_ticks"], out["y_ticks"] = ticks(c.XTicks, xDate), ticks(c.YTicks, yDate)
		out["x_tick_labels"], out["y_tick_labels"] = orEmpty(c.XTickLabels), orEmpty(c.YTickLabels)
		for _, e := range c.Elements {
			points := make([][2]any, 0, len(e.Points))
			for _, p := range e.Points {
				points = append(points, [2]any{point(p[0], xDate), point(p[1], yDate)})
			}
			elements = append(elements, map[string]any{"label": e.Label, "points": points})
		}
	case "bar":
		planar(out, c)
		if c.Orientation == "horizontal" {
			// E2B names a bar chart's axes by its bars: for barh the
			// category axis (y) becomes x_label.
			out["x_label"], out["y_label"] = out["y_label"], out["x_label"]
			out["x_unit"], out["y_unit"] = out["y_unit"], out["x_unit"]
		}
		for _, e := range c.Elements {
			elements = append(elements, map[string]any{"label": e.Label, "group": e.Group, "value": num(e.Value)})
		}
	case "box_and_whisker":
		planar(out, c)
		for _, e := range c.Elements {
			elements = append(elements, map[string]any{"label": e.Label, "min": num(e.Min),
				"first_quartile": num(e.FirstQuartile), "median": num(e.Median),
				"third_quartile": num(e.ThirdQuartile), "max": num(e.Max), "outliers": orEmptyF(e.Outliers)})
		}
	case "pie":
		for _, e := range c.Elements {
			elements = append(elements, map[string]any{"label": e.Label, "angle": num(e.Angle), "radius": num(e.Radius)})
		}
	case "histogram":
		planar(out, c)
		if c.Orientation != "" {
			out["orientation"] = c.Orientation
		}
		if c.Stacked {
			out["stacked"] = true
		}
		for _, e := range c.Elements {
			elements = append(elements, map[string]any{"label": e.Label, "edges": orEmptyF(e.Edges), "counts": orEmptyF(e.Counts)})
		}
	}
	out["elements"] = elements
	return out
}

// planar sets E2B's Chart2D fields: axis labels and their units.
func planar(out map[string]any, c *seam.Chart) {
	out["x_label"], out["y_label"] = orNull(c.XLabel), orNull(c.YLabel)
	out["x_unit"], out["y_unit"] = orNull(c.XUnit), orNull(c.YUnit)
}

func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orEmptyF(f []float64) []float64 {
	if f == nil {
		return []float64{}
	}
	return f
}

func num(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// ticks are E2B's: numbers, or on a datetime axis each tick's date as
// matplotlib's num2date(...).isoformat() writes it (UTC, "+00:00").
func ticks(t []float64, date bool) []any {
	out := make([]any, 0, len(t))
	for _, v := range t {
		if date {
			out = append(out, mplDate(v).Format(isoLayout(mplDate(v))+"-07:00"))
		} else {
			out = append(out, v)
		}
	}
	return out
}

// point is one coordinate as E2B sends it: a number, or on a datetime axis
// the date without a zone, as numpy's datetime64 and a naive datetime's
// isoformat() write it.
func point(v float64, date bool) any {
	if !date {
		return v
	}
	t := mplDate(v)
	return t.Format(isoLayout(t))
}

// mplDate is a matplotlib date number (days since 1970-01-01 UTC, its
// epoch since 3.3) as a time, to the microsecond as matplotlib keeps it.
func mplDate(days float64) time.Time {
	us := math.Round(days * 86400e6)
	if math.IsNaN(us) || us > math.MaxInt64/2 || us < math.MinInt64/2 {
		return time.Unix(0, 0).UTC()
	}
	return time.UnixMicro(int64(us)).UTC()
}

// isoLayout is Python's isoformat(): microseconds only when there are some.
func isoLayout(t time.Time) string {
	if t.Nanosecond() != 0 {
		return "2006-01-02T15:04:05.000000"
	}
	return "2006-01-02T15:04:05"
}
