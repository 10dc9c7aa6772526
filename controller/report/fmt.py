"""Formatting helpers for REPORT.md: null-safe numbers and aligned Markdown tables.

Every helper accepts ``None`` (or a value of the wrong type) and renders it as
:data:`DASH` instead of raising, because any field of ``result.json`` may be null.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

DASH = "—"


def num(x: Any) -> float | None:
    """``x`` as a finite float, or None when it is null, non-numeric or not finite."""
    if isinstance(x, bool) or x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def fx(x: Any, digits: int = 2) -> str:
    """A speedup such as ``1.84x``; DASH when unknown."""
    v = num(x)
    return DASH if v is None else f"{v:.{digits}f}x"


def pct(x: Any, digits: int = 1) -> str:
    """A fraction (0.174) as a percentage (``17.4%``); DASH when unknown."""
    v = num(x)
    return DASH if v is None else f"{100.0 * v:.{digits}f}%"


def ms(seconds: Any) -> str:
    """Seconds as milliseconds with 1 decimal (``114.0``); DASH when unknown."""
    v = num(seconds)
    return DASH if v is None else f"{1000.0 * v:.1f}"


def gpuh(x: Any) -> str:
    """GPU-hours with enough digits for tiny CPU-test campaigns (``0.0123``); DASH when unknown."""
    v = num(x)
    if v is None:
        return DASH
    return f"{v:.2f}" if abs(v) >= 10 else f"{v:.4f}" if abs(v) >= 0.001 else f"{v:.2e}" if v else "0"


def gib(x: Any) -> str:
    """GiB with 2 decimals (signed when negative); DASH when unknown."""
    v = num(x)
    return DASH if v is None else f"{v:+.2f}" if v < 0 else f"{v:.2f}"


def sci(x: Any) -> str:
    """A large count (FLOPs) as ``2.10e+09``; DASH when unknown."""
    v = num(x)
    return DASH if v is None else f"{v:.3g}" if abs(v) < 1e4 else f"{v:.3e}"


def text(x: Any, limit: int = 120) -> str:
    """Any value as one table-safe line: pipes escaped, newlines folded, long text cut."""
    if x is None or x == "" or x == [] or x == {}:
        return DASH
    s = x if isinstance(x, str) else json.dumps(x, sort_keys=True) if isinstance(x, (dict, list)) else str(x)
    s = " ".join(s.split()).replace("|", "\\|")
    return s if len(s) <= limit else s[: limit - 1] + "…"


def changed(ch: Any) -> str:
    """A ``{"knob": [ref, new]}`` mapping as ``knob: ref→new, ...``; DASH when empty."""
    if not isinstance(ch, dict) or not ch:
        return DASH
    parts = []
    for k in sorted(ch):
        v = ch[k]
        if isinstance(v, (list, tuple)) and len(v) == 2:
            parts.append(f"{k}: {_scalar(v[0])}→{_scalar(v[1])}")
        else:
            parts.append(f"{k}: {_scalar(v)}")
    return text(", ".join(parts), limit=200)


def _scalar(v: Any) -> str:
    return "null" if v is None else json.dumps(v) if isinstance(v, (dict, list, bool)) else str(v)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """An aligned GitHub-Markdown table.

    String cells are used as given (pass free text through :func:`text` first so
    pipes are escaped); other cells go through :func:`text`.  ``right`` holds the
    indexes of right-aligned (numeric) columns.  With no rows a single row of
    dashes is shown so the table still renders.
    """
    cells = [[" ".join((c if isinstance(c, str) else text(c)).split()) or DASH for c in r] for r in rows]
    cells = cells or [[DASH] * len(headers)]
    widths = [max([len(h), 3] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(vals: Sequence[str]) -> str:
        out = [v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(vals, widths))]
        return "| " + " | ".join(out) + " |"

    sep = "| " + " | ".join(("-" * (w - 1) + ":") if i in right else "-" * w for i, w in enumerate(widths)) + " |"
    return "\n".join([line(headers), sep] + [line(r) for r in cells])
