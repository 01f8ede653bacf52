"""Jupyter's complete, inspect and is_complete (the "assist" frame)."""

import builtins

from .errors import _safe_str
from .shell import _ensure_shell
from .state import _State, _log


# ---------------------------------------------------------------------------
# Jupyter's complete, inspect and is_complete (the "assist" frame)
#
# {"t":"assist","id":..,"kind":"complete"|"inspect"|"is_complete","code":..,
#  "cursor_pos":N,"detail_level":0|1} is answered with {"t":"assist","id":..}
# plus the kind's fields, as ipykernel's replies carry them. IPython is
# imported on first use only (the kernel's start stays cheap); without it a
# stdlib fallback answers. Results are bounded here and again by the host.

ASSIST_MATCHES = 1000  # completions kept
ASSIST_MATCH_LEN = 1000  # characters of one completion
ASSIST_TEXT = 1 << 20  # characters of an inspection's text
ASSIST_KINDS = ("complete", "inspect", "is_complete")


class _AssistRequest:
    __slots__ = ("id", "kind", "code", "cursor", "detail", "gen")

    @classmethod
    def parse(cls, msg, gen):
        aid, kind, code = msg.get("id"), msg.get("kind"), msg.get("code")
        if not isinstance(aid, str) or kind not in ASSIST_KINDS or not isinstance(code, str):
            return None
        cursor, detail = msg.get("cursor_pos"), msg.get("detail_level")
        if isinstance(cursor, bool) or not isinstance(cursor, int) or not 0 <= cursor <= len(code):
            cursor = len(code)
        if detail not in (0, 1):
            detail = 0
        req = cls()
        req.id, req.kind, req.code, req.cursor, req.detail, req.gen = aid, kind, code, cursor, detail, gen
        return req


def _assist(req):
    reply = {"t": "assist", "id": req.id}
    try:
        if req.kind == "complete":
            reply.update(_complete(req.code, req.cursor))
        elif req.kind == "inspect":
            reply.update(_inspect(req.code, req.cursor, req.detail))
        else:
            reply.update(_is_complete(req.code))
    except BaseException as exc:  # the kernel must answer, whatever the completer did
        _log("%s failed: %s" % (req.kind, _safe_str(exc)))
        reply.update({"complete": {"matches": [], "cursor_start": req.cursor, "cursor_end": req.cursor},
                      "inspect": {"found": False, "data": {}},
                      "is_complete": {"status": "unknown"}}[req.kind])
    return reply


def _complete(code, cursor):
    shell = _ensure_shell()
    if shell is not None:
        # As ipykernel's default (its "experimental" completions API): the
        # matches replace [start, end) of the code, in code points.
        from IPython.core.completer import provisionalcompleter, rectify_completions

        with provisionalcompleter():
            found = shell.Completer.completions(code, cursor)
            completions = []
            for c in rectify_completions(code, found):
                completions.append(c)
                if len(completions) >= ASSIST_MATCHES:
                    break
        matches = [c.text for c in completions]
        start = completions[0].start if completions else cursor
        end = completions[0].end if completions else cursor
    else:
        import re
        import rlcompleter

        m = re.search(r"[\w.]*$", code[:cursor])
        text = m.group(0) if m else ""
        completer = rlcompleter.Completer(_State.kernel.ns if _State.kernel is not None else {})
        matches = []
        while len(matches) < ASSIST_MATCHES:
            c = completer.complete(text, len(matches))
            if c is None:
                break
            matches.append(c)
        start, end = cursor - len(text), cursor
    seen, kept = set(), []
    for c in matches:
        if isinstance(c, str) and len(c) <= ASSIST_MATCH_LEN and c not in seen:
            seen.add(c)
            kept.append(c)
            if len(kept) >= ASSIST_MATCHES:
                break
    return {"matches": kept, "cursor_start": max(0, start), "cursor_end": max(start, end)}


def _inspect(code, cursor, detail):
    shell = _ensure_shell()
    data = {}
    if shell is not None:
        from IPython.utils.tokenutil import token_at_cursor

        name = token_at_cursor(code, cursor)
        try:
            bundle = shell.object_inspect_mime(name, detail_level=detail)
        except KeyError:
            bundle = None
        if bundle:
            text = bundle.get("text/plain")
            if isinstance(text, str):
                data["text/plain"] = text[:ASSIST_TEXT]
    else:
        import pydoc
        import re

        m = re.search(r"[\w.]*$", code[:cursor])
        name = m.group(0) if m else ""
        ns = _State.kernel.ns if _State.kernel is not None else {}
        parts = name.split(".") if name else []
        found, obj = False, None
        if parts and parts[0] in ns:
            found, obj = True, ns[parts[0]]
        elif parts and hasattr(builtins, parts[0]):
            found, obj = True, getattr(builtins, parts[0])
        for part in parts[1:]:
            try:
                obj = getattr(obj, part)
            except Exception:
                found = False
                break
        if found:
            data["text/plain"] = pydoc.render_doc(obj, renderer=pydoc.plaintext)[:ASSIST_TEXT]
    return {"found": bool(data), "data": data}


def _is_complete(code):
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        import codeop

        try:
            done = codeop.compile_command(code, "<cell>", "exec")
        except (SyntaxError, ValueError, OverflowError):
            return {"status": "invalid"}
        return {"status": "complete"} if done is not None else {"status": "incomplete", "indent": ""}
    status, indent = TransformerManager().check_complete(code)
    reply = {"status": status if status in ("complete", "incomplete", "invalid") else "unknown"}
    if status == "incomplete":
        reply["indent"] = " " * min(int(indent or 0), 64)
    return reply
