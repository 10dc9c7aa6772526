"""Output helpers shared by CLI verbs: aligned tables by default, JSON or CSV for scripts."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from typing import Any, Sequence

import click


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """An aligned plain-text table (columns default to the first row's keys)."""
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)).rstrip()]
    for row in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def emit(rows: Sequence[dict[str, Any]], fmt: str = "table", columns: Sequence[str] | None = None) -> None:
    """Print ``rows`` as ``table`` (aligned), ``json`` (a list of objects) or ``csv``."""
    if fmt == "json":
        click.echo(json.dumps([{k: _jsonable(v) for k, v in r.items()} for r in rows], indent=2, default=str))
    elif fmt == "csv":
        buf = io.StringIO()
        cols = list(columns or (rows[0].keys() if rows else []))
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _jsonable(r.get(k)) for k in cols})
        click.echo(buf.getvalue().rstrip("\n"))
    else:
        click.echo(table(rows, columns))


def emit_obj(obj: dict[str, Any], as_json: bool) -> None:
    """Print one object as ``key: value`` lines or JSON."""
    if as_json:
        click.echo(json.dumps({k: _jsonable(v) for k, v in obj.items()}, indent=2, default=str))
        return
    width = max((len(k) for k in obj), default=0)
    for k, v in obj.items():
        if isinstance(v, (dict, list)):
            v = json.dumps(v, default=str)
        click.echo(f"{k.ljust(width)}  {_cell(v)}")
