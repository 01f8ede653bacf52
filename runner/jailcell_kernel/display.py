"""Rich output: MIME bundles of values and display() items, and text/plain
as Jupyter shows it."""

import base64
import io
import json
import sys

from .charts import _chart_of
from .state import _ensure_shell, _State

TEXT_PLAIN_LIMIT = 64 << 10  # bytes of repr() kept in text/plain
MIME_LIMIT = 16 << 20  # larger entries of a rich bundle are left out

# display() preference for an item's primary MIME type, best first.
_PRIMARY_ORDER = (
    "image/png",
    "image/jpeg",
    "image/svg+xml",
    "text/html",
    "text/markdown",
    "application/json",
    "text/latex",
    "text/plain",
)

# IPython's rich-repr protocol, one method per MIME type.
_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/json", "_repr_json_"),
    ("text/latex", "_repr_latex_"),
)


def _cut_utf8(s, limit, what):
    b = s.encode("utf-8", "replace")
    if len(b) <= limit:
        return s
    return b[:limit].decode("utf-8", "ignore") + "\n[%s truncated: %d bytes total]" % (what, len(b))


def _plain(obj, lines=False):
    try:
        text = repr(obj)
    except Exception as exc:
        text = "<%s object; repr() raised %s>" % (type(obj).__name__, type(exc).__name__)
    else:
        if lines:
            # IPython's _repr_pprint: the repr's lines, joined by "\n".
            text = "\n".join(text.splitlines())
    return _cut_utf8(text, TEXT_PLAIN_LIMIT, "output")


def _repr_method(obj, name):
    if isinstance(obj, type):
        return None  # on a class, _repr_*_ are unbound functions
    try:
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def _is_jsonish(mime):
    return mime == "application/json" or mime.endswith("+json")


def _put(bundle, mime, value):
    """Store value under mime in a JSON-safe form, or leave it out."""
    if not isinstance(mime, str) or not mime or value is None:
        return
    if isinstance(value, (bytes, bytearray, memoryview)):
        if mime.startswith("text/") or mime == "image/svg+xml":
            value = bytes(value).decode("utf-8", "replace")
        else:
            value = base64.b64encode(value).decode("ascii")
    elif _is_jsonish(mime) and isinstance(value, (dict, list)):
        try:
            size = len(json.dumps(value, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            return
        if size > MIME_LIMIT:
            return
        bundle[mime] = value
        return
    if not isinstance(value, str) or len(value) > MIME_LIMIT:
        return
    bundle[mime] = value


class _FigureBundle(dict):
    """A MIME bundle with data beside it, in the display item rather than
    in the bundle as a MIME type (so that Jupyter's clients see the bundle
    Jupyter would send): a figure's chart (see _chart_of), a DataFrame's
    table (see _table_of)."""

    chart = None
    table = None


TABLE_CELLS = 10000  # a DataFrame larger than this has no table
TABLE_TEXT = 1 << 10  # characters of one string value or column name kept


def _table_value(v):
    """One value of a table as JSON takes it: what is not a JSON scalar is
    its text, NaN and infinities null, dates in ISO form (E2B's)."""
    if v is None or isinstance(v, (bool, int)):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    iso = getattr(v, "isoformat", None)
    if callable(iso):
        try:
            v = iso()
        except Exception:
            pass
    if not isinstance(v, str):
        try:
            item = getattr(v, "item", None)  # a numpy scalar
            if callable(item):
                return _table_value(item())
        except Exception:
            pass
        v = _plain(v)
    return v[:TABLE_TEXT]


def _table_of(obj):
    """A pandas DataFrame's columns as {name: [values]}, E2B's Result.data
    (to_dict(orient="list")), or None: not a DataFrame, or over
    TABLE_CELLS cells (an agent gets the head in text/plain; the whole
    frame is a file away)."""
    pandas = sys.modules.get("pandas")
    if pandas is None or not isinstance(obj, pandas.DataFrame):
        return None
    try:
        if obj.size > TABLE_CELLS:
            return None
        table = {}
        for name, values in obj.to_dict(orient="list").items():
            key = name if isinstance(name, str) else _plain(name)
            table[key[:TABLE_TEXT]] = [_table_value(v) for v in values]
        return table
    except Exception:
        return None


def _figure_bundle(obj):
    """PNG bundle for a matplotlib Figure, or None for anything else."""
    figure = sys.modules.get("matplotlib.figure")
    if figure is None or not isinstance(obj, figure.Figure):
        return None
    buf = io.BytesIO()
    try:
        obj.savefig(buf, format="png", bbox_inches="tight")
    except Exception:
        buf = io.BytesIO()  # a tight bbox fails on some artists
        obj.savefig(buf, format="png")
    chart = _chart_of(obj)  # drawn now: tick labels are set
    # Shown now, so the end-of-cell sweep must not show it again.
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        try:
            plt.close(obj)
        except Exception:
            pass
    bundle = _FigureBundle({"text/plain": _plain(obj)})
    bundle.chart = chart
    _put(bundle, "image/png", buf.getvalue())
    return bundle


def _mime_bundle(obj):
    """IPython-style MIME bundle: text/plain always, rich types when the
    object offers them. A raising repr method is skipped, never fatal."""
    try:
        fig = _figure_bundle(obj)
    except Exception:
        fig = None
    if fig is not None:
        return fig
    bundle = _FigureBundle()
    bundle.table = _table_of(obj)
    method = _repr_method(obj, "_repr_mimebundle_")
    if method is not None:
        try:
            got = method(include=None, exclude=None)
        except Exception:
            got = None
        if isinstance(got, tuple) and got:
            got = got[0]  # (data, metadata)
        if isinstance(got, dict):
            for mime, value in got.items():
                _put(bundle, mime, value)
    for mime, name in _REPR_METHODS:
        if mime in bundle:
            continue
        method = _repr_method(obj, name)
        if method is None:
            continue
        try:
            value = method()
        except Exception:
            continue
        if isinstance(value, tuple) and len(value) == 2:
            value = value[0]  # (data, metadata)
        _put(bundle, mime, value)
    if not isinstance(bundle.get("text/plain"), str):
        bundle["text/plain"] = _pretty(obj)
    else:
        bundle["text/plain"] = _cut_utf8(bundle["text/plain"], TEXT_PLAIN_LIMIT, "output")
    return bundle


def _pretty(obj):
    """text/plain as Jupyter shows it: IPython's display formatter and
    pretty printer (`int` for type(1), long lists broken one item a line,
    sorted sets). Most values print exactly as repr() under it; for those
    the kernel does not load IPython (see _pretty_is_repr)."""
    shell = _State.shell
    if shell is None:
        if _pretty_is_repr(obj):
            return _plain(obj, lines=True)
        shell = _ensure_shell()
    if shell is not None:
        try:
            text = shell.display_formatter.formatters["text/plain"](obj)
        except Exception:
            text = None
        if isinstance(text, str):
            return _cut_utf8(text, TEXT_PLAIN_LIMIT, "output")
    return _plain(obj)


def _display_item(bundle):
    mime = next((m for m in _PRIMARY_ORDER if m in bundle), None)
    if mime is None:
        mime = next(iter(bundle))
    data = bundle[mime]
    if not isinstance(data, str):
        data = json.dumps(data, ensure_ascii=False, allow_nan=False)
    item = {"mime": mime, "data": data, "bundle": bundle}
    chart = getattr(bundle, "chart", None)
    if chart is not None:
        item["chart"] = chart
    table = getattr(bundle, "table", None)
    if table is not None:
        item["table"] = table
    return item


# Exact types whose text/plain under IPython is their repr().
_REPR_SCALARS = frozenset((int, float, complex, bool, str, bytes, type(None)))
_REPR_CONTAINERS = frozenset((list, tuple, dict))
# Modules whose types IPython.lib.pretty prints its own way (by type or by
# name: type, functions, sets, exceptions, re, datetime, collections...).
_PRETTY_MODULES = frozenset(("builtins", "collections", "_collections", "re", "datetime", "types", "os"))
PRETTY_WIDTH = 79  # IPython's PlainTextFormatter.max_width


def _pretty_is_repr(obj):
    """True if IPython's pretty printer would show obj as repr() does
    (give or take line breaks), so that the kernel need not load IPython
    to format it. Follows IPython.lib.pretty's lookup: exact scalars;
    short lists, tuples and dicts of them (pretty breaks only what is wider
    than 79 columns); otherwise the first class of the MRO that defines
    __repr__, unless pretty has its own printer for a class before it or
    the MRO reaches object (pretty's default omits the word "object")."""
    cls = type(obj)
    if cls in _REPR_SCALARS:
        return True
    if cls in _REPR_CONTAINERS:
        budget = [64]  # elements looked at, so that a huge value costs nothing
        if not _simple_container(obj, budget, 4):
            return False
        try:
            return len(repr(obj)) <= PRETTY_WIDTH
        except Exception:
            return False
    try:
        for klass in cls.__mro__:
            if klass is object:
                return False
            if getattr(klass, "__module__", None) in _PRETTY_MODULES:
                return False
            d = klass.__dict__
            if "_repr_pretty_" in d:
                return False
            if callable(d.get("__repr__")):
                return True
    except Exception:
        pass
    return False


def _simple_container(obj, budget, depth):
    if depth == 0:
        return False
    items = obj.items() if type(obj) is dict else ((x, None) for x in obj)
    for k, v in items:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        for x in (k, v) if type(obj) is dict else (k,):
            t = type(x)
            if t in _REPR_SCALARS:
                continue
            if t in _REPR_CONTAINERS and _simple_container(x, budget, depth - 1):
                continue
            return False
    return True
