"""progress.png: best verified speedup so far against cumulative GPU-hours (the paper's Figure 2 style).

:func:`plot_progress` is pure apart from writing one PNG; matplotlib is imported
inside it with the non-interactive ``Agg`` backend, so importing this module is cheap
and needs no display.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infrarsi.controller.report.fmt import num

STAGE_COLOR = {"search": "tab:blue", "reference": "tab:gray", "promotion": "tab:purple"}
FAILED_OUTCOMES = ("crash", "timeout", "cancelled")


def _trials(result: dict[str, Any]) -> list[dict[str, Any]]:
    ts = [t for t in (result.get("trials") or []) if isinstance(t, dict)]
    return sorted(ts, key=lambda t: (num(t.get("seq")) is None, num(t.get("seq")) or 0.0))


def _positions(trials: list[dict[str, Any]]) -> list[float]:
    """Cumulative device-hours per trial: ``cum_hours`` (GPU-hours, or CPU-hours for CPU trials) when given, else
    ``cum_gpu_hours``, else a running sum of ``gpu_hours`` + ``cpu_hours``."""
    xs, run = [], 0.0
    for t in trials:
        run += (num(t.get("gpu_hours")) or 0.0) + (num(t.get("cpu_hours")) or 0.0)
        c = num(t.get("cum_hours"))
        c = num(t.get("cum_gpu_hours")) if c is None else c
        if c is not None:
            run = c
        xs.append(run)
    return xs


def unit_of(result: dict[str, Any]) -> str:
    """``"GPU"`` or ``"CPU"``: what the campaign's trials ran on (and its cost is booked in)."""
    cost = result.get("cost") if isinstance(result.get("cost"), dict) else {}
    camp = result.get("campaign") if isinstance(result.get("campaign"), dict) else {}
    if cost.get("unit") in ("GPU", "CPU"):
        return str(cost["unit"])
    return "CPU" if camp.get("device") == "cpu" else "GPU"


def best_so_far(result: dict[str, Any]) -> list[tuple[float, float]]:
    """The step line: (cumulative GPU-h, best verified speedup) after each improving accepted search trial.

    Starts at (0, 1.0): the reference.  Only trials with outcome ``ok``, ``accepted`` true and a
    known speedup count; reference and promotion runs do not move the line.
    """
    trials = _trials(result)
    pts, best = [(0.0, 1.0)], 1.0
    for t, x in zip(trials, _positions(trials)):
        s = num(t.get("speedup"))
        if t.get("stage") == "search" and t.get("outcome") == "ok" and t.get("accepted") and s is not None and s > best:
            best = s
            pts.append((x, best))
    return pts


def plot_progress(result: dict[str, Any], path: Path) -> Path:
    """Write the progress plot of ``result`` (schema ``infrarsi.result/1``) as a PNG at ``path``.

    Every trial is a marker at (cumulative GPU-h, speedup): dot ok, triangle OOM, x crash/timeout/
    cancelled, red square rejected (annotated with its first failed layer), faint diamond anything else;
    colour marks the stage (reference grey, promotion purple, search blue).  Trials without a
    measured speedup sit on a band below the lowest speedup.  Horizontal lines at 1.0x and at
    the delivered speedup.  Returns ``path``.  Errors: OSError if ``path`` cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    trials = _trials(result)
    xs = _positions(trials)
    speeds = [num(t.get("speedup")) for t in trials]
    delivered = num(result.get("delivered_speedup"))
    known = [s for s in speeds if s is not None and s > 0] + [1.0] + ([delivered] if delivered else [])
    floor = min(known) * 0.9

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    try:
        line = best_so_far(result)
        x_end = max(xs + [line[-1][0]]) or 1.0
        lx = [p[0] for p in line] + [x_end]
        ly = [p[1] for p in line] + [line[-1][1]]
        ax.step(lx, ly, where="post", color="tab:green", lw=2, label="best verified speedup so far", zorder=2)
        ax.axhline(1.0, color="black", lw=0.8, ls="--", label="reference 1.0x")
        if delivered is not None:
            ax.axhline(delivered, color="tab:green", lw=1.0, ls=":", label=f"delivered {delivered:.2f}x")
        seen: set[str] = set()
        for t, x, s in zip(trials, xs, speeds):
            _marker(ax, t, x, s if s is not None and s > 0 else floor, seen)
        if not trials:
            ax.text(0.5, 0.5, "no trials recorded", transform=ax.transAxes, ha="center", va="center")
        ax.set_yscale("log")
        fmt = FuncFormatter(lambda v, _pos: f"{v:.2g}x")
        ax.yaxis.set_major_formatter(fmt)
        ax.yaxis.set_minor_formatter(fmt)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        if any(s is None or s <= 0 for s in speeds):
            ax.axhline(floor, color="0.7", lw=0.6)
            ax.annotate("no measured speed", (0, floor), xycoords=("axes fraction", "data"), xytext=(3, 3),
                        textcoords="offset points", fontsize=7, color="0.4")
        ax.set_xlabel(f"cumulative {unit_of(result)}-hours")
        ax.set_ylabel("speedup over reference (x)")
        camp = result.get("campaign") if isinstance(result.get("campaign"), dict) else {}
        ax.set_title(f"infrarsi: {camp.get('name') or 'campaign'}: search progress")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best", fontsize=7, framealpha=0.8)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path


def _marker(ax: Any, t: dict[str, Any], x: float, y: float, seen: set[str]) -> None:
    """Draw one trial; each (kind, stage) gets one legend entry."""
    outcome, stage = str(t.get("outcome") or ""), str(t.get("stage") or "search")
    color = STAGE_COLOR.get(stage, "tab:blue")
    if outcome == "rejected":
        kind, style = "rejected", dict(marker="s", color="red", s=36)
        layer = t.get("first_failed_layer")
        if layer:
            ax.annotate(str(layer), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color="red")
    elif outcome == "oom":
        kind, style = "OOM", dict(marker="^", color=color, s=36)
    elif outcome in FAILED_OUTCOMES:
        kind, style = "crash/timeout", dict(marker="x", color=color, s=36)
    elif outcome == "ok":
        kind, style = "ok", dict(marker="o", color=color, s=22)
    else:  # not finished or unknown outcome
        kind, style = "other", dict(marker="d", color=color, s=22, alpha=0.5)
    label = f"{kind} ({stage})" if kind != "rejected" else "rejected (verifier)"
    if stage == "promotion" and style["marker"] != "x":
        style.update(edgecolors="black", linewidths=0.8)
    ax.scatter([x], [y], zorder=3, label=None if label in seen else label, **style)
    seen.add(label)
