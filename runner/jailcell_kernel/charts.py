"""Chart data: the numbers a matplotlib figure drew, next to its PNG; and
pyplot's show(), patched the moment pyplot is imported."""

import sys

from .frames import _encoded_size
from .hooks import _spec_then
from .state import _State


# ---------------------------------------------------------------------------
# Chart data: the numbers a matplotlib figure drew, next to its PNG
#
# A figure's display item carries "chart": the chart type, title, axis
# labels and the plotted series, read from the Figure's artists (Line2D
# data, bar containers, scatter offsets, pie wedges, the histograms
# Axes.hist returned). Field names follow E2B's code-interpreter charts
# (type, title, x_label, y_label, elements...). What this cannot read
# faithfully is "unknown" with a reason, and the PNG is all there is.
# Everything is bounded, and any failure here leaves the PNG alone.

CHART_LIMIT = 1 << 20  # bytes of a chart's JSON; larger becomes "unknown"
CHART_POINTS = 5000  # points kept per series (and bins per histogram)
CHART_NUMBERS = 40000  # numbers kept per figure, all series and ticks
CHART_ELEMENTS = 1000  # elements per figure (bars, series, wedges)
CHART_AXES = 16  # subplots described in a superchart
CHART_TICKS = 100  # ticks kept per axis
CHART_TEXT = 256  # characters kept of a title, label or tick label


class _ChartBudget:
    """What one figure's chart may still hold; truncated says it ran out."""

    def __init__(self):
        self.numbers = CHART_NUMBERS
        self.elements = CHART_ELEMENTS
        self.truncated = False

    def take(self, count, each=1):
        """How many of count items of each numbers fit (at most CHART_POINTS)."""
        n = max(0, min(count, CHART_POINTS, self.numbers // each))
        if n < count:
            self.truncated = True
        self.numbers -= n * each
        return n

    def element(self):
        if self.elements <= 0:
            self.truncated = True
            return False
        self.elements -= 1
        return True


def _chart_text(s):
    s = "" if s is None else str(s)
    return s[:CHART_TEXT]


def _chart_label(artist):
    """An artist's legend label; matplotlib's automatic ones ("_child0",
    "_nolegend_") start with an underscore and mean none."""
    try:
        label = artist.get_label()
    except Exception:
        return ""
    label = _chart_text(label)
    return "" if label.startswith("_") else label


def _chart_floats(values, n):
    """The first n values as finite floats, or None if any is not."""
    import numpy as np

    arr = np.ma.filled(np.ma.asarray(values, dtype=float)[:n], np.nan).ravel()
    if not np.all(np.isfinite(arr)):
        return None
    return arr.tolist()


def _chart_points(xy, budget):
    """[[x, y], ...] of the finite points among the first a budget allows
    of an (N, 2) array; cut first, so a huge series is never copied whole."""
    import numpy as np

    arr = np.ma.asarray(xy)
    n = budget.take(len(arr), 2)
    arr = np.ma.filled(np.ma.asarray(arr[:n], dtype=float), np.nan).reshape(-1, 2)
    arr = arr[np.all(np.isfinite(arr), axis=1)]  # NaN breaks a line: the gap is not kept
    return arr.tolist()


def _chart_unit(label):
    """The unit of a label written "Speed (m/s)" or "Speed [m/s]"."""
    label = label.rstrip()
    for open_, close in (("(", ")"), ("[", "]")):
        if label.endswith(close) and open_ in label:
            unit = label[label.rindex(open_) + 1 : -1].strip()
            if unit and open_ not in unit:
                return unit
    return None


def _chart_scale(axis, scale):
    """linear, log, ... as matplotlib names it, or categorical/datetime when
    the axis converts strings or dates."""
    try:
        converter = axis.converter
        if converter is not None:
            mod = type(converter).__module__
            if mod == "matplotlib.category":
                return "categorical"
            if mod == "matplotlib.dates":
                return "datetime"
    except Exception:
        pass
    return _chart_text(scale)


def _chart_tick_label(text):
    """A tick label as text: log axes draw "$\\mathdefault{10^{2}}$",
    which reads 10^{2}."""
    text = _chart_text(text)
    if len(text) > 1 and text[0] == "$" and text[-1] == "$":
        text = text[1:-1]
        if text.startswith("\\mathdefault{") and text.endswith("}"):
            text = text[len("\\mathdefault{") : -1]
    return text


def _chart_ticks(ax, which, budget):
    """Tick positions inside the view and their labels, as drawn."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    ticks, labels = [], []
    for tick in axis.get_major_ticks():
        loc = tick.get_loc()
        if loc is None or not (lo <= loc <= hi) or len(ticks) >= CHART_TICKS:
            continue
        try:
            loc = float(loc)
        except (TypeError, ValueError):
            continue
        if loc != loc or loc in (float("inf"), float("-inf")) or budget.take(1) < 1:
            continue
        ticks.append(loc)
        labels.append(_chart_tick_label(tick.label1.get_text()))
    return ticks, labels


def _chart_axes_info(ax, chart, budget, ticks=True):
    """Title, axis labels, units, scales and ticks of one Axes."""
    title = ax.get_title() or ax.get_title("left") or ax.get_title("right")
    if title:
        chart["title"] = _chart_text(title)
    for which in ("x", "y"):
        axis = ax.xaxis if which == "x" else ax.yaxis
        label = _chart_text(axis.get_label().get_text())
        chart[which + "_label"] = label
        unit = _chart_unit(label)
        if unit:
            chart[which + "_unit"] = unit
        chart[which + "_scale"] = _chart_scale(axis, ax.get_xscale() if which == "x" else ax.get_yscale())
        if ticks:
            locs, labels = _chart_ticks(ax, which, budget)
            chart[which + "_ticks"] = locs
            chart[which + "_tick_labels"] = labels


def _chart_unknown(reason, title=""):
    return {"type": "unknown", "title": _chart_text(title), "elements": [], "reason": reason}


def _chart_tick_names(axis):
    """Position -> label of the ticks an axis was given names at (a
    categorical axis, or set_xticks with labels as pandas does); empty
    for numeric ticks, whose labels ("1.0", "1.5") are not names."""
    names = {}
    try:
        if type(axis.get_major_locator()).__name__ not in ("FixedLocator", "StrCategoryLocator"):
            return names
        for tick in axis.get_major_ticks()[: CHART_ELEMENTS * 2]:
            loc, text = tick.get_loc(), tick.label1.get_text()
            if loc is not None and text:
                names[round(float(loc), 9)] = _chart_text(text)
    except Exception:
        pass
    return names


def _chart_nearest(names, pos):
    """The name of the tick nearest pos, if closer than half the spacing
    of the ticks: grouped bars sit beside their category's tick."""
    if not names:
        return None
    locs = sorted(names)
    half = min((b - a for a, b in zip(locs, locs[1:])), default=1.0) / 2
    best = min(locs, key=lambda loc: abs(loc - pos))
    return names[best] if abs(best - pos) < half else None


def _chart_bars(ax, containers, budget):
    """A bar chart from BarContainers: one element per bar, labelled by
    the category tick under it and grouped by its container's label."""
    orient = {getattr(c, "orientation", None) or "vertical" for c in containers}
    if len(orient) != 1:
        return _chart_unknown("bars of both orientations in one axes")
    horizontal = orient.pop() == "horizontal"
    chart = {"type": "bar", "orientation": "horizontal" if horizontal else "vertical"}
    _chart_axes_info(ax, chart, budget, ticks=False)
    names = _chart_tick_names(ax.yaxis if horizontal else ax.xaxis)
    elements, stacked = [], False
    for c in containers:
        group = _chart_label(c)
        for rect in c.patches:
            if not budget.element() or budget.take(1) < 1:
                break
            if horizontal:
                pos, value, base = rect.get_y() + rect.get_height() / 2, rect.get_width(), rect.get_x()
            else:
                pos, value, base = rect.get_x() + rect.get_width() / 2, rect.get_height(), rect.get_y()
            value, base, pos = float(value), float(base), float(pos)
            if not all(v == v and abs(v) != float("inf") for v in (value, base, pos)):
                continue  # a missing value draws no bar
            stacked = stacked or base != 0
            label = _chart_nearest(names, pos) or _chart_text("%g" % pos)
            elements.append({"label": label, "group": group, "value": value})
    if stacked and len(containers) > 1:
        chart["stacked"] = True
    chart["elements"] = elements
    return chart


def _chart_histogram(ax, hists, budget):
    """A histogram from what Axes.hist returned: per dataset, the bin
    edges and the counts (or densities; stacked ones cumulative, as
    matplotlib returns them)."""
    import numpy as np

    chart = {"type": "histogram"}
    _chart_axes_info(ax, chart, budget, ticks=False)
    elements = []
    for counts, edges, labels, stacked, horizontal in hists:
        counts = np.asarray(counts, dtype=float)
        if counts.ndim == 1:
            counts = counts[np.newaxis]
        if stacked:
            chart["stacked"] = True
        if horizontal:
            chart["orientation"] = "horizontal"
        for i, row in enumerate(counts):
            if not budget.element():
                break
            n = budget.take(len(row), 2)
            e = _chart_floats(edges, n + 1)
            c = _chart_floats(row, n)
            if e is None or c is None:
                return _chart_unknown("a histogram with non-finite bins or counts", chart.get("title", ""))
            label = labels[i] if i < len(labels) else ""
            elements.append({"label": _chart_text(label), "edges": e, "counts": c})
    chart["elements"] = elements
    return chart


def _chart_axes(ax, budget):
    """The chart of one Axes: its type decided by which artists it has."""
    title = ax.get_title()
    name = getattr(ax, "name", "rectilinear")
    if name != "rectilinear":
        return _chart_unknown("%s axes" % _chart_text(name), title)
    if ax.images:
        return _chart_unknown("an image (imshow, matshow, spy)", title)
    if ax.tables:
        return _chart_unknown("a table", title)
    # Only histograms still drawn: ax.cla() drops the patches, not the record.
    drawn = {id(p) for p in ax.patches}
    hists = [h for h in getattr(ax, "_jailcell_hists", None) or [] if h[5] & drawn]
    drawn |= {id(l) for l in ax.lines}
    boxes = [b for b in getattr(ax, "_jailcell_boxes", None) or [] if b[2] & drawn]
    hist_artists = set()
    for _, _, _, _, _, ids in hists:
        hist_artists |= ids
    for _, _, ids in boxes:
        hist_artists |= ids  # a box plot's lines and patches are not series of their own
    # Reference lines (axhline, axvline) are drawn in axes coordinates:
    # decoration, not data.
    lines = [l for l in ax.lines if l.get_transform() == ax.transData and id(l) not in hist_artists]
    scatters, others = [], []
    for coll in ax.collections:
        if type(coll).__name__ == "PathCollection" and coll.get_offset_transform() == ax.transData:
            scatters.append(coll)
        else:
            others.append(type(coll).__name__)
    if others:
        return _chart_unknown("%s (contour, mesh, fill or error bars)" % others[0], title)
    bars = [c for c in ax.containers if type(c).__name__ == "BarContainer" and not (set(map(id, c.patches)) & hist_artists)]
    bar_patches = {id(p) for c in bars for p in c.patches}
    patches = [p for p in ax.patches if id(p) not in bar_patches and id(p) not in hist_artists]
    if patches and all(type(p).__name__ == "Wedge" for p in patches) and not (lines or scatters or bars or hists or boxes):
        return _chart_pie(ax, patches, budget)
    if patches:
        return _chart_unknown("a %s patch" % type(patches[0]).__name__, title)
    kinds = [k for k, v in (("line", lines), ("scatter", scatters), ("bar", bars), ("histogram", hists),
                            ("box_and_whisker", boxes)) if v]
    if len(kinds) > 1:
        return _chart_unknown("mixed %s in one axes" % " and ".join(kinds), title)
    if not kinds:
        return _chart_unknown("nothing plotted", title)
    if hists:
        return _chart_histogram(ax, [h[:5] for h in hists], budget)
    if boxes:
        return _chart_boxes(ax, boxes, budget)
    if bars:
        return _chart_bars(ax, bars, budget)
    chart = {"type": "line" if lines else "scatter"}
    _chart_axes_info(ax, chart, budget)
    elements = []
    for artist in lines or scatters:
        if not budget.element():
            break
        xy = artist.get_xydata() if lines else artist.get_offsets()
        elements.append({"label": _chart_label(artist), "points": _chart_points(xy, budget)})
    chart["elements"] = elements
    return chart


def _chart_boxes(ax, boxes, budget):
    """A box plot from what Axes.boxplot returned: per box, its whisker
    ends (min, max), quartiles, median and the outliers drawn."""
    import numpy as np

    vert = {b[1] for b in boxes}
    if len(vert) != 1:
        return _chart_unknown("box plots of both orientations in one axes", ax.get_title())
    horizontal = not vert.pop()
    chart = {"type": "box_and_whisker"}
    if horizontal:
        chart["orientation"] = "horizontal"
    _chart_axes_info(ax, chart, budget, ticks=False)
    names = _chart_tick_names(ax.yaxis if horizontal else ax.xaxis)

    def values(line):
        return np.asarray(line.get_xdata() if horizontal else line.get_ydata(), dtype=float).ravel()

    elements = []
    for out, _, _ in boxes:
        medians, whiskers, fliers = (out.get(k) or [] for k in ("medians", "whiskers", "fliers"))
        if len(whiskers) != 2 * len(medians):
            return _chart_unknown("a box plot drawn without its whiskers", chart.get("title", ""))
        for i, med in enumerate(medians):
            if not budget.element() or budget.take(5) < 5:
                break
            # Each whisker runs from its quartile to its end ([q1, low],
            # [q3, high]), notched box or not.
            lo, hi, m = values(whiskers[2 * i]), values(whiskers[2 * i + 1]), values(med)
            outliers = values(fliers[i]) if i < len(fliers) else np.zeros(0)
            outliers = outliers[np.isfinite(outliers)]
            if len(lo) != 2 or len(hi) != 2 or not len(m) or not np.all(np.isfinite(np.concatenate([lo, hi, m[:1]]))):
                continue
            pos = float(np.mean(med.get_ydata() if horizontal else med.get_xdata()))
            n = budget.take(len(outliers))
            elements.append({
                "label": _chart_nearest(names, pos) or _chart_text("%g" % pos),
                "min": float(lo[1]),
                "first_quartile": float(lo[0]),
                "median": float(m[0]),
                "third_quartile": float(hi[0]),
                "max": float(hi[1]),
                "outliers": outliers[:n].tolist(),
            })
    chart["elements"] = elements
    return chart


def _chart_pie(ax, wedges, budget):
    """A pie: each wedge's label, angle (degrees, to 1e-4: matplotlib keeps
    them as float32) and radius; its share of the pie is angle / 360."""
    chart = {"type": "pie", "title": _chart_text(ax.get_title())}
    elements = []
    for w in wedges:
        if not budget.element() or budget.take(2) < 2:
            break
        angle = round(float(w.theta2) - float(w.theta1), 4)
        elements.append({"label": _chart_label(w), "angle": angle, "radius": float(w.r)})
    chart["elements"] = elements
    return chart


def _chart_of(fig):
    """The chart of a drawn Figure as a JSON-ready dict, or None when
    there is nothing to say (no axes). Never raises."""
    try:
        axes = [ax for ax in fig.axes if not hasattr(ax, "_colorbar")]
        if not axes:
            return None
        budget = _ChartBudget()
        suptitle = getattr(fig, "_suptitle", None)
        suptitle = _chart_text(suptitle.get_text()) if suptitle is not None else ""
        if len(axes) == 1:
            chart = _chart_axes(axes[0], budget)
            if suptitle and not chart.get("title"):
                chart["title"] = suptitle
        else:
            # One level only: each subplot is a chart of its own, in
            # the order they were added.
            chart = {"type": "superchart", "title": suptitle, "elements": []}
            if len(axes) > CHART_AXES:
                budget.truncated = True
            for ax in axes[:CHART_AXES]:
                try:
                    chart["elements"].append(_chart_axes(ax, budget))
                except Exception as exc:
                    chart["elements"].append(_chart_unknown("cannot read this axes: %s" % type(exc).__name__))
        chart.setdefault("title", "")
        if budget.truncated:
            chart["truncated"] = True
        if _encoded_size(chart) > CHART_LIMIT:
            return _chart_unknown("chart data over %d KiB" % (CHART_LIMIT >> 10), chart.get("title", ""))
        return chart
    except Exception as exc:
        try:
            return _chart_unknown("cannot read this figure: %s" % type(exc).__name__)
        except Exception:
            return None


def _chart_patch_axes(axes_module):
    """Remember on the Axes what each hist() and boxplot() call returned:
    once drawn, a histogram's bars look like any other bars and a box plot
    is a heap of lines."""
    Axes = getattr(axes_module, "Axes", None)
    _chart_patch_boxplot(Axes)
    hist = getattr(Axes, "hist", None)
    if hist is None or getattr(hist, "_jailcell", False):
        return

    def jailcell_hist(self, x, *args, **kwargs):
        out = hist(self, x, *args, **kwargs)
        try:
            counts, edges, patches = out
            ids = set()
            stack = [patches]
            while stack and len(ids) < 100000:
                p = stack.pop()
                if isinstance(p, (list, tuple)) or type(p).__name__ in ("BarContainer", "silent_list"):
                    stack.extend(p)
                else:
                    ids.add(id(p))
            label = kwargs.get("label")
            labels = [label] if isinstance(label, str) else list(label or [])
            labels = ["" if l is None or str(l).startswith("_") else str(l) for l in labels]
            stacked = bool(kwargs.get("stacked"))
            horizontal = kwargs.get("orientation") == "horizontal"
            if not hasattr(self, "_jailcell_hists"):
                self._jailcell_hists = []
            self._jailcell_hists.append((counts, edges, labels, stacked, horizontal, ids))
        except Exception:
            pass
        return out

    jailcell_hist._jailcell = True
    jailcell_hist.__wrapped__ = hist
    jailcell_hist.__doc__ = hist.__doc__
    Axes.hist = jailcell_hist


def _chart_patch_boxplot(Axes):
    boxplot = getattr(Axes, "boxplot", None)
    if boxplot is None or getattr(boxplot, "_jailcell", False):
        return

    def jailcell_boxplot(self, x, *args, **kwargs):
        out = boxplot(self, x, *args, **kwargs)
        try:
            ids = {id(a) for artists in out.values() for a in artists}
            if not hasattr(self, "_jailcell_boxes"):
                self._jailcell_boxes = []
            self._jailcell_boxes.append((out, kwargs.get("vert", True) is not False, ids))
        except Exception:
            pass
        return out

    jailcell_boxplot._jailcell = True
    jailcell_boxplot.__wrapped__ = boxplot
    jailcell_boxplot.__doc__ = boxplot.__doc__
    Axes.boxplot = jailcell_boxplot


# ---------------------------------------------------------------------------
# matplotlib


class _PyplotHook:
    """Meta path finder that patches matplotlib.pyplot the moment it is
    imported, so that even a cell that imports pyplot and calls show() in
    one go gets the kernel's show(), without the kernel importing
    matplotlib itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        return _spec_then(self, name, path, target, _patch_pyplot)


def _patch_pyplot(plt):
    show = getattr(plt, "show", None)
    if show is None or getattr(show, "_jailcell", False):
        return

    def jailcell_show(*args, **kwargs):
        """Send every open figure to the cell's output as PNG, then close it."""
        if _State.kernel is not None and _State.kernel.cell is not None:
            _State.kernel.flush_figures()

    jailcell_show._jailcell = True
    jailcell_show.__wrapped__ = show
    plt.show = jailcell_show
    _chart_patch_axes(sys.modules.get("matplotlib.axes"))
