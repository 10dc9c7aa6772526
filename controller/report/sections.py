"""The finance-facing and per-trial sections of REPORT.md (cost, memory, refused patches,
trials, promotion re-runs, plot).

Each ``*_section`` takes the ``result.json`` dict and returns one Markdown section
starting with its ``## `` heading; none raises on null or missing fields.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from infrarsi.controller.report.fmt import DASH, changed, fx, gib, gpuh, ms, num, pct, table, text

OUTCOME_ORDER = ("ok", "rejected", "oom", "crash", "timeout", "cancelled")


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def trials_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The trial dicts of ``result`` in ``seq`` order (non-dict entries dropped)."""
    ts = [t for t in _l(result.get("trials")) if isinstance(t, dict)]
    return sorted(ts, key=lambda t: (num(t.get("seq")) is None, num(t.get("seq")) or 0.0))


# ------------------------------------------------------------------ cost
def cost_section(r: dict[str, Any]) -> str:
    """GPU-hours by stage and failure class, failed and rejected trials included, and the share of budget."""
    c = _d(r.get("cost"))
    total = num(c.get("total_gpu_hours"))
    failed, rejected = num(c.get("failed_gpu_hours")), num(c.get("rejected_gpu_hours"))
    useful = None if total is None else total - (failed or 0.0) - (rejected or 0.0)

    def share(x: float | None) -> str:
        return pct(x / total) if x is not None and total else DASH

    rows = [
        ["Total", gpuh(total), share(total)],
        ["  completed and accepted", gpuh(useful), share(useful)],
        ["  failed (OOM, crash, timeout)", gpuh(failed), share(failed)],
        ["  rejected by the verifier", gpuh(rejected), share(rejected)],
        ["Budget", gpuh(c.get("budget_gpu_hours")), DASH],
        ["Share of budget used", pct(c.get("share_of_budget")), DASH],
    ]
    out = "## Cost ledger\n\n" + table(["GPU-hours", "GPU-h", "Share of total"], rows, right=(1, 2))
    stages = [s for s in _l(c.get("by_stage")) if isinstance(s, dict)]
    srows = [[text(s.get("stage")), text(s.get("failure_class") or "none"), text(s.get("entries")),
              gpuh(s.get("gpu_hours")), share(num(s.get("gpu_hours"))), text(s.get("llm_tokens"))] for s in stages]
    out += "\n\nBy stage and failure class:\n\n" + table(
        ["Stage", "Failure class", "Entries", "GPU-h", "Share", "LLM tokens"], srows, right=(2, 3, 4, 5))
    return out


# ------------------------------------------------------------------ memory
def memory_section(r: dict[str, Any]) -> str:
    """The censored memory model's per-setting GiB estimates, largest spender first."""
    rows_in = [m for m in _l(r.get("memory_table")) if isinstance(m, dict)]
    if not rows_in:
        return ("## Memory model\n\nNo memory data: no trial reported peak memory, "
                "so no per-setting estimates were fitted.")
    rows_in.sort(key=lambda m: (num(m.get("gib")) is None, -(num(m.get("gib")) or 0.0)))
    rows = [[text(m.get("name")), text(m.get("value"), 40), gib(m.get("gib")),
             DASH if num(m.get("sd")) is None else f"±{num(m.get('sd')):.2f}", text(m.get("class"))] for m in rows_in]
    return ("## Memory model\n\nEstimated change in per-GPU peak memory for each setting relative to the reference "
            "(right-censored Tobit model fitted to all trials, OOMs included):\n\n"
            + table(["Knob", "Value", "GiB", "SD", "Class"], rows, right=(2, 3)))


# ------------------------------------------------------------------ refused
def refused_section(r: dict[str, Any]) -> str:
    """Patches refused at intake, with the reason for each."""
    ref = _d(r.get("refused_patches"))
    if not ref:
        return "## Refused patches\n\nNone: every offered patch passed intake."
    rows = [[f"`{text(k)}`", text(v, 200)] for k, v in sorted(ref.items())]
    return "## Refused patches\n\n" + table(["Patch", "Reason"], rows)


# ------------------------------------------------------------------ trials
def outcome_counts(r: dict[str, Any]) -> Counter[str]:
    """How many trials ended in each outcome."""
    return Counter(str(t.get("outcome") or "unknown") for t in trials_of(r))


def trial_note(t: dict[str, Any]) -> str:
    """The last column of the trial table: ``L2: reason`` for rejections, else the reason."""
    layer, reason = t.get("first_failed_layer"), t.get("reason")
    if layer:
        return text(f"{layer}: {reason}" if reason else str(layer), 140)
    return text(reason, 140)


def trials_section(r: dict[str, Any]) -> str:
    """Every trial: seq, stage, knobs changed, patches, outcome, ms/update, speedup, GPU-h, layer/reason."""
    ts = trials_of(r)
    counts = outcome_counts(r)
    keys = [k for k in OUTCOME_ORDER if counts.get(k)] + sorted(k for k in counts if k not in OUTCOME_ORDER)
    summary = ", ".join(f"{counts[k]} {k}" for k in keys) or "none"
    rows = [[text(t.get("seq")), text(t.get("stage")), changed(t.get("changed_passed") or t.get("changed")),
             ", ".join(text(p) for p in _l(t.get("patches"))) or DASH, text(t.get("outcome")),
             ms(t.get("step_time_s")), fx(t.get("speedup"), 3), gib(t.get("peak_mem_gib")),
             gpuh(t.get("gpu_hours")), trial_note(t)] for t in ts]
    return (f"## Trials\n\n{len(ts)} trials: {summary}.\n\n"
            + table(["#", "Stage", "Knobs changed", "Patches", "Outcome", "ms/update", "Speedup", "Peak GiB",
                     "GPU-h", "First failed layer / reason"], rows, right=(0, 5, 6, 7, 8)))


# ------------------------------------------------------------------ promotion
def promotion_section(r: dict[str, Any]) -> str:
    """The back-to-back reference/candidate re-run pairs behind the promotion decision."""
    pr = _d(r.get("promotion"))
    pairs = [p for p in _l(pr.get("pairs")) if isinstance(p, dict)]
    out = ["## Promotion re-runs", ""]
    margin = num(pr.get("promotion_margin"))
    if margin is None:
        margin = num(_d(r.get("reference")).get("promotion_margin"))
    out.append(f"A candidate is promoted only if its back-to-back paired speedup clears the margin {pct(margin, 2)}.")
    out += ["", "Speedup (one definition, docs/verifier.md \"Verified speedup\"): exp(mean over back-to-back pairs "
                "of ln(T_ref / T_cand)), T = a run's mean step time on the wrapper's clock over the timing window, "
                "rare stragglers winsorized; margin = exp(2·sigma_bound) − 1, sigma_bound = max(90% upper bound of "
                "sigma_pair pooled over every repeat, 0.5%)."]
    cands = _d(pr.get("candidates"))
    crow = []
    for sig, c in cands.items():
        c = _d(c)
        iv = _l(c.get("interval"))
        crow.append([text(sig, 12), fx(num(c.get("speedup")), 4), text(c.get("pairs")),
                     f"{fx(num(iv[0]), 4)} – {fx(num(iv[1]), 4)}" if len(iv) == 2 else DASH])
    if crow:
        out += ["", table(["Candidate", "Paired speedup", "Pairs", "Interval (±2·sigma_bound/√pairs)"], crow,
                          right=(1, 2))]
    if not pairs:
        out += ["", "No promotion re-runs were made (no candidate reached verification)."]
    else:
        rows = []
        for p in pairs:
            a, b = num(p.get("reference_s")), num(p.get("candidate_s"))
            rows.append([text(p.get("group"), 40), text(p.get("reference_trial")), text(p.get("candidate_trial")),
                         ms(a), ms(b), fx(a / b if a and b else None, 3), text(p.get("candidate_outcome")),
                         text(p.get("reason"), 100)])
        out += ["", table(["Pair", "Ref trial", "Cand trial", "Ref ms", "Cand ms", "Speedup", "Outcome", "Reason"],
                          rows, right=(1, 2, 3, 4, 5))]
    rej = _l(pr.get("rejected_reruns"))
    if rej:
        out += ["", "Re-runs rejected by the verifier: " + "; ".join(text(x, 160) for x in rej) + "."]
    return "\n".join(out)


# ------------------------------------------------------------------ plot
def plot_section(plot_name: str) -> str:
    """The plot reference and how to read it."""
    return (f"## Progress plot\n\n![Best verified speedup against cumulative GPU-hours]({plot_name})\n\n"
            "Step line: best verified speedup so far (search trials) against cumulative GPU-hours. Markers: "
            "dot = completed and accepted, triangle = OOM, x = crash/timeout, red square = rejected by the "
            "verifier (labelled with its first failed layer); grey = reference runs, purple = promotion re-runs. "
            "Dashed lines: 1.0x and the delivered speedup.")
