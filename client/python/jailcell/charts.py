"""The data a matplotlib figure plotted, beside its PNG: Result.chart.

Shaped like E2B's code-interpreter charts (ChartType, LineChart, ScatterChart,
BarChart, PieChart, BoxAndWhiskerChart, SuperChart, with the same attribute
names), plus what
jailcell adds: HistogramChart, and on every chart `truncated` (points,
elements or subplots were left out) and `reason` (why a chart is "unknown",
PNG only). Built from the wire's chart object (docs/notebook.md, "Chart
data"); `to_dict()` gives it back as received.
"""

import enum
from typing import Any, Dict, List, Optional, Tuple, Union

__all__ = [
    "ChartType", "ScaleType", "Chart", "Chart2D", "PointData", "PointChart", "LineChart", "ScatterChart", "BarData",
    "BarChart", "PieData", "PieChart", "HistogramData", "HistogramChart", "BoxAndWhiskerData", "BoxAndWhiskerChart",
    "SuperChart", "ChartTypes",
    "deserialize_chart",
]


class ChartType(str, enum.Enum):
    LINE = "line"
    SCATTER = "scatter"
    BAR = "bar"
    PIE = "pie"
    HISTOGRAM = "histogram"
    BOX_AND_WHISKER = "box_and_whisker"
    SUPERCHART = "superchart"
    UNKNOWN = "unknown"


class ScaleType(str, enum.Enum):
    LINEAR = "linear"
    DATETIME = "datetime"
    CATEGORICAL = "categorical"
    LOG = "log"
    SYMLOG = "symlog"
    LOGIT = "logit"
    FUNCTION = "function"
    FUNCTIONLOG = "functionlog"
    ASINH = "asinh"
    UNKNOWN = "unknown"


def _scale(v: Any) -> ScaleType:
    try:
        return ScaleType(v)
    except ValueError:
        return ScaleType.UNKNOWN


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _list(v: Any) -> List[Any]:
    return list(v) if isinstance(v, list) else []


class Chart:
    """A figure's chart. An "unknown" one is PNG only: reason says why
    (an image, 3-D axes, contour, mixed artists in one axes...)."""

    type: ChartType
    title: str
    elements: List[Any]

    def __init__(self, **kwargs: Any) -> None:
        self._raw_data = kwargs
        try:
            self.type = ChartType(kwargs.get("type"))
        except ValueError:
            self.type = ChartType.UNKNOWN
        self.title = _str(kwargs.get("title"))
        self.elements = _list(kwargs.get("elements"))
        self.truncated = kwargs.get("truncated") is True
        self.reason: Optional[str] = kwargs.get("reason") if isinstance(kwargs.get("reason"), str) else None

    def to_dict(self) -> Dict[str, Any]:
        return self._raw_data

    def __repr__(self) -> str:
        return "%s(type=%r, title=%r, elements=%d)" % (type(self).__name__, self.type.value, self.title,
                                                        len(self.elements))


class Chart2D(Chart):
    x_label: Optional[str]
    y_label: Optional[str]
    x_unit: Optional[str]
    y_unit: Optional[str]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.x_label = kwargs.get("x_label")
        self.y_label = kwargs.get("y_label")
        self.x_unit = kwargs.get("x_unit")
        self.y_unit = kwargs.get("y_unit")
        self.x_scale = _scale(kwargs.get("x_scale"))
        self.y_scale = _scale(kwargs.get("y_scale"))


class PointData:
    """One series: its legend label and its [x, y] points."""

    def __init__(self, **kwargs: Any) -> None:
        self.label: str = _str(kwargs.get("label"))
        self.points: List[Tuple[float, float]] = [(p[0], p[1]) for p in _list(kwargs.get("points"))]

    def __repr__(self) -> str:
        return "PointData(label=%r, points=%d)" % (self.label, len(self.points))


class PointChart(Chart2D):
    elements: List[PointData]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.x_ticks: List[float] = _list(kwargs.get("x_ticks"))
        self.x_tick_labels: List[str] = _list(kwargs.get("x_tick_labels"))
        self.y_ticks: List[float] = _list(kwargs.get("y_ticks"))
        self.y_tick_labels: List[str] = _list(kwargs.get("y_tick_labels"))
        self.elements = [PointData(**d) for d in self.elements if isinstance(d, dict)]


class LineChart(PointChart):
    pass


class ScatterChart(PointChart):
    pass


class BarData:
    """One bar: its category (label), series (group) and height (value;
    the width of a horizontal bar)."""

    def __init__(self, **kwargs: Any) -> None:
        self.label: str = _str(kwargs.get("label"))
        self.group: str = _str(kwargs.get("group"))
        self.value: Optional[float] = kwargs.get("value")

    def __repr__(self) -> str:
        return "BarData(label=%r, group=%r, value=%r)" % (self.label, self.group, self.value)


class BarChart(Chart2D):
    elements: List[BarData]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.orientation: str = _str(kwargs.get("orientation")) or "vertical"
        self.stacked = kwargs.get("stacked") is True
        self.elements = [BarData(**d) for d in self.elements if isinstance(d, dict)]


class PieData:
    """One wedge: label, angle in degrees (its share is angle / 360), radius."""

    def __init__(self, **kwargs: Any) -> None:
        self.label: str = _str(kwargs.get("label"))
        self.angle: Optional[float] = kwargs.get("angle")
        self.radius: Optional[float] = kwargs.get("radius")

    def __repr__(self) -> str:
        return "PieData(label=%r, angle=%r, radius=%r)" % (self.label, self.angle, self.radius)


class PieChart(Chart):
    elements: List[PieData]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.elements = [PieData(**d) for d in self.elements if isinstance(d, dict)]


class HistogramData:
    """One dataset of a histogram: bin edges (one more than counts) and the
    counts hist() returned (densities with density=True, cumulative when
    the chart is stacked)."""

    def __init__(self, **kwargs: Any) -> None:
        self.label: str = _str(kwargs.get("label"))
        self.edges: List[float] = _list(kwargs.get("edges"))
        self.counts: List[float] = _list(kwargs.get("counts"))

    def __repr__(self) -> str:
        return "HistogramData(label=%r, bins=%d)" % (self.label, len(self.counts))


class HistogramChart(Chart2D):
    elements: List[HistogramData]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.orientation: str = _str(kwargs.get("orientation")) or "vertical"
        self.stacked = kwargs.get("stacked") is True
        self.elements = [HistogramData(**d) for d in self.elements if isinstance(d, dict)]


class BoxAndWhiskerData:
    """One box: the whiskers' ends (min, max), the quartiles, the median and
    the outliers drawn."""

    def __init__(self, **kwargs: Any) -> None:
        self.label: str = _str(kwargs.get("label"))
        self.min: Optional[float] = kwargs.get("min")
        self.first_quartile: Optional[float] = kwargs.get("first_quartile")
        self.median: Optional[float] = kwargs.get("median")
        self.third_quartile: Optional[float] = kwargs.get("third_quartile")
        self.max: Optional[float] = kwargs.get("max")
        self.outliers: List[float] = _list(kwargs.get("outliers"))

    def __repr__(self) -> str:
        return "BoxAndWhiskerData(label=%r, median=%r)" % (self.label, self.median)


class BoxAndWhiskerChart(Chart2D):
    elements: List[BoxAndWhiskerData]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.orientation: str = _str(kwargs.get("orientation")) or "vertical"
        self.elements = [BoxAndWhiskerData(**d) for d in self.elements if isinstance(d, dict)]


class SuperChart(Chart):
    """A figure of several subplots: one chart each, in the figure's order."""

    elements: List["ChartTypes"]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        subs = [deserialize_chart(d) for d in self.elements if isinstance(d, dict) and d.get("type") != "superchart"]
        self.elements = [c for c in subs if c is not None]


ChartTypes = Union[LineChart, ScatterChart, BarChart, PieChart, HistogramChart, BoxAndWhiskerChart, SuperChart, Chart]

_CLASSES = {
    "line": LineChart,
    "scatter": ScatterChart,
    "bar": BarChart,
    "pie": PieChart,
    "histogram": HistogramChart,
    "box_and_whisker": BoxAndWhiskerChart,
    "superchart": SuperChart,
}


def deserialize_chart(data: Any) -> Optional[ChartTypes]:
    """The chart of a wire chart object, or None if there is none."""
    if not isinstance(data, dict) or not data:
        return None
    return _CLASSES.get(data.get("type"), Chart)(**data)  # type: ignore[arg-type]
