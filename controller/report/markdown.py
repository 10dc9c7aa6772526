"""REPORT.md: the campaign's result rendered for a researcher and for finance.

:func:`render_report` is pure: it reads a ``result.json`` dict (schema
``infrarsi.result/1``, every field possibly null or missing) and returns Markdown
text.  It never raises on missing data; absent sections say why they are empty.
The headline comes first; when nothing faster was delivered the reason is stated
in the first lines.
"""

from __future__ import annotations

import json
from typing import Any

from infrarsi.controller.report.fmt import DASH, fx, gib, gpuh, ms, num, pct, sci, table, text
from infrarsi.controller.report.plot import unit_of
from infrarsi.controller.report.proposers import proposers_section
from infrarsi.controller.report.sections import (
    cost_section,
    failures_section,
    memory_section,
    plot_section,
    promotion_section,
    refused_section,
    trials_section,
)
from infrarsi.verifier.judge import INVARIANTS

PLOT_NAME = "progress.png"

#: The section headings, in order (tests and readers rely on them).
SECTIONS = (
    "## Result",
    "## Speedup and MFU",
    "## Noise calibration",
    "## Promoted configuration",
    "## Verifier verdicts",
    "## Cost ledger",
    "## Proposers",
    "## Memory model",
    "## Refused patches",
    "## Trials",
    "## Failures",
    "## Promotion re-runs",
    "## Progress plot",
)

LAYER_MEANING = {
    "L0": "receipt integrity (signature, schema, replay)",
    "L1": "execution (completes, no errors, memory cap)",
    "L2": "workload (tokens, data, model, frozen files)",
    "L3": "optimizer steps and schedule",
    "L4": "numerics (loss, gradient norm, eval, precision)",
    "L5": "timing (wrapper clock, executor clock, speed reproduces)",
}
#: invariants the verifier judges when result.json does not say (the paper's 16, executor_clock, params_match)
DEFAULT_INVARIANT_COUNT = len(INVARIANTS)

MFU_FORMULA = (
    "MFU = F_update / (N_GPU × P_peak × t_update), with F_update = tokens per update × FLOPs per token, "
    "FLOPs per token = 6 × active matrix parameters + attention FLOPs (PaLM dense-equivalent; recomputation, "
    "communication and unrouted experts excluded), P_peak = the GPU's dense (non-sparse) BF16 peak, "
    "t_update = post-warmup window-mean step time"
)


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def render_report(result: dict[str, Any]) -> str:
    """The full text of REPORT.md for one campaign ``result`` (schema ``infrarsi.result/1``).

    Output: Markdown ending with a newline, with every heading of :data:`SECTIONS`
    in order, and the progress plot referenced as ``progress.png`` beside it.
    Errors: none for null/empty fields; a non-dict ``result`` raises TypeError.
    """
    if not isinstance(result, dict):
        raise TypeError(f"result must be a dict, got {type(result).__name__}")
    parts = [
        _title(result), _result(result), _mfu(result), _noise(result) + _experience(result), _promoted(result), _verdicts(result),
        cost_section(result), proposers_section(result), memory_section(result), refused_section(result), trials_section(result),
        failures_section(result), promotion_section(result), plot_section(PLOT_NAME),
    ]
    return "\n\n".join(p.rstrip() for p in parts) + "\n"


def _experience(r: dict[str, Any]) -> str:
    from infrarsi.controller.report.sections import experience_section

    text_ = experience_section(r)
    return "\n\n" + text_ if text_ else ""


# ------------------------------------------------------------------ headline
def delivered(result: dict[str, Any]) -> float | None:
    """The delivered speedup, or None when the campaign delivered none (e.g. it failed)."""
    return num(result.get("delivered_speedup"))


def campaign_state(r: dict[str, Any]) -> str:
    """The campaign's state as the report shows it: ``done`` for a campaign whose report this is (the report
    stage is the campaign's last act, so "report" there means finished), else the recorded state."""
    state = _d(r.get("campaign")).get("state")
    return "done" if state == "report" else str(state or "unknown")


def mfu_omitted(r: dict[str, Any]) -> str | None:
    """Why MFU is not computed although it could be (CPU trials: no GPU peak), or None."""
    why = r.get("mfu_omitted")
    if isinstance(why, str) and why:
        return why
    return "CPU trials: there is no GPU peak to measure MFU against" if unit_of(r) == "CPU" else None


def cost_hours(r: dict[str, Any]) -> tuple[float | None, str]:
    """(total hours, unit) of the campaign's cost: GPU-hours, or CPU-hours when its trials ran on the CPU."""
    cost = _d(r.get("cost"))
    unit = unit_of(r)
    return num(cost.get("total_cpu_hours" if unit == "CPU" else "total_gpu_hours")), unit


def _title(r: dict[str, Any]) -> str:
    c = _d(r.get("campaign"))
    name = c.get("name") or "campaign"
    head = f"# infrarsi report: {name}" + (f" (campaign #{c['id']})" if c.get("id") is not None else "")
    s = delivered(r)
    reason = text(r.get("reason"), limit=400)
    p = _d(r.get("promoted"))
    if s is None:
        line = f"**No speedup delivered (campaign state: {campaign_state(r)}).** Reason: {reason}."
    elif not p or round(s, 2) == 1.00:
        line = (f"**Delivered speedup: {fx(s)}. Nothing was promoted; the reference configuration stays.** "
                f"Reason: {reason}.")
    else:
        ref_t, new_t = _d(r.get("reference")).get("step_time_s"), p.get("step_time_s")
        line = (f"**Delivered speedup: {fx(s)}** ({ms(ref_t)} → {ms(new_t)} ms per update, same computation, "
                f"verified). Reason: {reason}.")
    mfu = _d(r.get("mfu"))
    before, after = _mfu_values(r)
    cost = _d(r.get("cost"))
    facts = []
    hours, unit = cost_hours(r)
    if mfu_omitted(r):
        facts.append(f"MFU not computed ({mfu_omitted(r)})")
    elif before is not None or after is not None:
        facts.append(f"MFU {pct(before)} → {pct(after)}")
    elif not mfu:
        facts.append("MFU not computed (FLOPs per token unknown)")
    facts.append(f"cost {gpuh(hours)} {unit}-h ({pct(cost.get('share_of_budget'))} of budget)")
    facts.append(f"{len(_l(r.get('trials')))} trials")
    out = f"{head}\n\n{line}\n\n" + " · ".join(facts)
    warning = isolation_warning(r)
    return out + (f"\n\n{warning}" if warning else "")


def isolation_modes(r: dict[str, Any]) -> dict[str, int]:
    """Trials per ``wrapper.isolation.mode`` ("bwrap", "none"; "unknown" for receipts that predate it)."""
    counts: dict[str, int] = {}
    for t in _l(r.get("trials")):
        if isinstance(t, dict) and t.get("outcome") not in (None, "intent", "submitted", "cancelled"):
            mode = str(t.get("isolation") or "unknown")
            counts[mode] = counts.get(mode, 0) + 1
    return counts


def isolation_warning(r: dict[str, Any]) -> str:
    """A loud line when any trial ran without a sandbox (``isolation.mode == "none"``), else ""."""
    n = isolation_modes(r).get("none", 0)
    if not n:
        return ""
    return (f"**WARNING: {n} trial(s) ran WITHOUT isolation (wrapper isolation mode \"none\"): the untrusted job "
            "could reach the controller's files, other trials and anything the user can; their verdicts rest on "
            "the job's good behaviour.**")


def _result(r: dict[str, Any]) -> str:
    c = _d(r.get("campaign"))
    ref, p = _d(r.get("reference")), _d(r.get("promoted"))
    before, after = _mfu_values(r)
    repo = text(c.get("repo"), 80) + (f" @ {text(c.get('commit'), 40)}" if c.get("commit") else "")
    rows = [
        ["Delivered speedup", fx(r.get("delivered_speedup"))],
        ["Step time, reference (ms/update)", ms(ref.get("step_time_s"))],
        ["Step time, delivered (ms/update)", ms(p.get("step_time_s") if p else ref.get("step_time_s"))],
        ["MFU before → after", f"not computed ({mfu_omitted(r)})" if mfu_omitted(r) else
         f"{pct(before)} → {pct(after)}"],
        [f"{cost_hours(r)[1]}-hours spent (share of budget)", f"{gpuh(cost_hours(r)[0])} "
                                                            f"({pct(_d(r.get('cost')).get('share_of_budget'))})"],
        ["Campaign", f"#{c.get('id', DASH)} {text(c.get('name'))}, owner {text(c.get('owner'))}, "
                     f"state {text(campaign_state(r))}"],
        ["Repository", repo],
        ["Executor", text(c.get("executor"))],
        ["Contract digest", text(c.get("contract_digest"), 72)],
        ["Started / finished", f"{text(c.get('created_at'))} / {text(c.get('finished_at'))}"],
    ]
    return "## Result\n\n" + table(["Item", "Value"], rows)


# ------------------------------------------------------------------ MFU
def _mfu_values(r: dict[str, Any]) -> tuple[float | None, float | None]:
    """MFU before/after: the engine's values, else computed from the inputs when all are known."""
    m = _d(r.get("mfu"))
    before, after = num(m.get("before")), num(m.get("after"))
    ref_t = num(_d(r.get("reference")).get("step_time_s"))
    p = _d(r.get("promoted"))
    new_t = num(p.get("step_time_s")) if p else ref_t
    if before is None:
        before = _mfu_of(m, ref_t)
    if after is None:
        after = _mfu_of(m, new_t)
    return before, after


def _mfu_of(m: dict[str, Any], step_s: float | None) -> float | None:
    f, tok, dev, peak = (num(m.get(k)) for k in ("flops_per_token", "tokens_per_update", "devices", "peak_flops"))
    if None in (f, tok, dev, peak, step_s) or not (dev and peak and step_s):
        return None
    return tok * f / (dev * peak * step_s)  # type: ignore[operator]


def _mfu(r: dict[str, Any]) -> str:
    s = delivered(r)
    out = ["## Speedup and MFU", ""]
    if _d(r.get("promoted")):
        out.append(f"Delivered speedup **{fx(s)}**: reference window-mean step time divided by the promoted one, "
                   "measured in back-to-back re-runs against the untouched reference.")
    else:
        out.append(f"Delivered speedup **{fx(s)}**: no candidate was promoted, so the reference configuration "
                   "and its step time stand.")
    m = _d(r.get("mfu"))
    before, after = _mfu_values(r)
    out += ["", f"Formula (the paper's): {MFU_FORMULA}."]
    if mfu_omitted(r):
        out += ["", f"MFU not computed: {mfu_omitted(r)}."]
        return "\n".join(out)
    if not m:
        out += ["", "MFU not computed: FLOPs per token is unknown (declare workload.flops_per_token in the task "
                    "contract, or pass extra={'flops_per_token': ...} in the adapter's receipt header)."]
        return "\n".join(out)
    if m.get("formula"):
        out += ["", f"As computed: `{text(m.get('formula'), 200)}`"]
    ref_t = _d(r.get("reference")).get("step_time_s")
    p = _d(r.get("promoted"))
    rows = [
        ["FLOPs per token", sci(m.get("flops_per_token"))],
        ["FLOPs per token from", text(m.get("flops_per_token_source") or "receipt header (extra.flops_per_token)")],
        ["Tokens per update", sci(m.get("tokens_per_update"))],
        ["Devices (N_GPU)", text(m.get("devices"))],
        ["Peak per device (FLOP/s, dense BF16)", sci(m.get("peak_flops"))],
        ["Step time before / after (ms)", f"{ms(ref_t)} / {ms(p.get('step_time_s') if p else ref_t)}"],
        ["MFU before", pct(before)],
        ["MFU after", pct(after)],
    ]
    return "\n".join(out) + "\n\n" + table(["Quantity", "Value"], rows)


# ------------------------------------------------------------------ noise
def _noise(r: dict[str, Any]) -> str:
    ref = _d(r.get("reference"))
    sig = num(ref.get("sigma_pair"))
    margin = num(ref.get("promotion_margin"))
    if margin is None:
        margin = num(_d(r.get("promotion")).get("promotion_margin"))
    gate = num(ref.get("big_knob_gate"))
    means = [num(x) for x in _l(ref.get("reference_window_means"))]
    nb = _d(_d(r.get("promotion")).get("noise"))
    if nb:
        sig = num(nb.get("sigma_pair"))
        srcs = ", ".join(f"{text(v)} {text(k)}" for k, v in _d(nb.get("sources")).items() if v)
        bound_rows = [
            ["sigma_pair estimate (all repeats)", f"{pct(sig, 3)} ({text(nb.get('dof'))} dof, set by "
                                                  f"{text(nb.get('set_by'))})"],
            [f"sigma_pair {pct(num(nb.get('level')), 0)} upper bound", pct(num(nb.get("sigma_ucb")), 3)],
            ["sigma_pair bound used (minimum " + pct(num(nb.get("sigma_min")), 2) + ")",
             pct(num(nb.get("sigma_bound")), 3)],
            ["Runs behind it", f"{text(nb.get('n_runs'))} ({srcs or DASH})"],
        ]
        margin = num(nb.get("margin"))
    else:
        bound_rows = []
    rows = [
        *([] if nb else [["sigma_pair (paired log step-time noise)",
                           DASH if sig is None else f"{sig:.4f} ({pct(sig, 2)})"]]),
        *bound_rows,
        ["Promotion margin exp(2·sigma_bound) − 1", pct(margin, 2)],
        ["Big-knob gate max(0.02, 2·sigma_pair)", pct(gate, 2)],
        ["Reference step time (ms/update)", ms(ref.get("step_time_s"))],
        ["Reference window means (ms)", ", ".join(ms(x) for x in means) or DASH],
        ["Reference peak memory (GiB)", gib(ref.get("peak_mem_gib"))],
    ]
    out = "## Noise calibration\n\n" + table(["Quantity", "Value"], rows)
    phases = {k: num(v) for k, v in _d(ref.get("phases")).items()}
    total = sum(v for v in phases.values() if v)
    if phases:
        prow = [[text(k), ms(v), pct(v / total) if v is not None and total else DASH] for k, v in phases.items()]
        out += "\n\nReference phase breakdown:\n\n" + table(["Phase", "ms", "Share"], prow, right=(1, 2))
    return out


# ------------------------------------------------------------------ promoted config
def _promoted(r: dict[str, Any]) -> str:
    p = r.get("promoted")
    out = ["## Promoted configuration", ""]
    if not isinstance(p, dict):
        out.append(f"Nothing was promoted; the reference configuration stays. Reason: {text(r.get('reason'), 400)}.")
        cfg = _d(r.get("reference")).get("config")
        if cfg:
            out += ["", "Reference configuration:", "", "```json", json.dumps(cfg, indent=2, sort_keys=True), "```"]
        return "\n".join(out)
    ch = _d(p.get("changed_passed")) or _d(p.get("changed"))  # values as the job received them
    rows = [[text(k), _cell(v[0] if _pair(v) else None), _cell(v[1] if _pair(v) else v)] for k, v in sorted(ch.items())]
    out.append(f"Speedup {fx(p.get('speedup'))}; step time {ms(p.get('step_time_s'))} ms/update.")
    out += ["", "Knobs changed from the reference:", "", table(["Knob", "Reference", "Promoted"], rows)]
    patches = _l(p.get("patches"))
    out += ["", "Source patches: " + (", ".join(f"`{text(x)}`" for x in patches) if patches else "none.")]
    if p.get("config"):
        out += ["", "Full promoted configuration:", "", "```json", json.dumps(p["config"], indent=2, sort_keys=True),
                "```"]
    diff = p.get("diff")
    if isinstance(diff, str) and diff.strip():
        fence = "````" if "```" in diff else "```"
        out += ["", "Diff:", "", f"{fence}diff", diff.rstrip("\n"), fence]
    else:
        out += ["", "Diff: no source changes (launch configuration only)."]
    return "\n".join(out)


def _pair(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and len(v) == 2


def _cell(v: Any) -> str:
    return "null" if v is None else text(json.dumps(v) if isinstance(v, (bool, dict, list)) else v, 60)


# ------------------------------------------------------------------ verdicts
def _verdicts(r: dict[str, Any]) -> str:
    out = ["## Verifier verdicts", ""]
    p = _d(r.get("promoted"))
    verdicts = [v for v in _l(p.get("verdicts")) if isinstance(v, dict)]
    count = num(r.get("invariant_count"))
    count_s = str(int(count)) if count is not None else str(DEFAULT_INVARIANT_COUNT)
    out.append(f"The verifier judges every trial on {count_s} invariants in five layers (the paper's 16 plus "
               "`executor_clock`, the executor's own start/end times against the receipt's timeline, and `params_match`, "
               "a checksum of the final parameters), after the "
               "L0 receipt checks (size cap, signature, schema, replay).")
    modes = isolation_modes(r)
    if modes:
        out += ["", "Trial isolation (exec wrapper sandbox): "
                + ", ".join(f"{text(k)} {v}" for k, v in sorted(modes.items())) + "."]
    warning = isolation_warning(r)
    if warning:
        out += ["", warning]
    out.append("")
    if verdicts:
        n_pass = sum(1 for v in verdicts if v.get("status") == "pass")
        out.append(f"Promoted candidate: {n_pass}/{len(verdicts)} invariants pass.")
        rows = [[text(v.get("layer")), text(v.get("invariant")), "yes" if v.get("required") else "no",
                 text(v.get("status")), text(v.get("reason"), 100)] for v in verdicts]
        out += ["", table(["Layer", "Invariant", "Required", "Status", "Reason"], rows)]
    else:
        out.append("No promoted candidate, so no verdicts to show.")
    sr = _d(_d(r.get("promotion")).get("speed_reproduces"))
    if sr:
        out += ["", f"Promotion check `{text(sr.get('name') or 'speed_reproduces')}` ({text(sr.get('layer'))}): "
                    f"**{text(sr.get('status'))}**: {text(sr.get('reason'), 300)}"]
    counts = rejections_by_layer(r)
    rows = [[k, LAYER_MEANING.get(k, DASH), str(v)] for k, v in counts.items()]
    rows.append(["total", "all layers", str(sum(counts.values()))])
    out += ["", "Trials rejected by the verifier, by first failed layer:", "",
            table(["Layer", "Checks", "Rejected"], rows, right=(2,))]
    return "\n".join(out)


def rejections_by_layer(r: dict[str, Any]) -> dict[str, int]:
    """Rejections per layer L0..L5: the engine's counts, else counted from rejected trials."""
    given = _d(r.get("rejections_by_layer"))
    counts = {k: 0 for k in LAYER_MEANING}
    if given:
        for k, v in given.items():
            counts[str(k)] = int(num(v) or 0)
        return counts
    for t in _l(r.get("trials")):
        if isinstance(t, dict) and t.get("outcome") == "rejected":
            layer = str(t.get("first_failed_layer") or "?")
            counts[layer] = counts.get(layer, 0) + 1
    return counts


__all__ = ["render_report", "rejections_by_layer", "isolation_modes", "isolation_warning", "SECTIONS", "MFU_FORMULA",
           "PLOT_NAME"]
