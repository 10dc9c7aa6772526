"""The finance-facing and per-trial sections of REPORT.md (cost, memory, refused patches,
trials, failures, promotion re-runs, plot).

Each ``*_section`` takes the ``result.json`` dict and returns one Markdown section
starting with its ``## `` heading; none raises on null or missing fields.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from infrarsi.controller.report.fmt import DASH, changed, fx, gib, gpuh, ms, num, pct, table, text
from infrarsi.controller.report.plot import unit_of
from infrarsi.controller.search.failures import failure_signature, told_failure

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
    """GPU-hours by stage and failure class, failed and rejected trials included, and the share of budget;
    CPU-hours instead when the campaign's trials ran on the CPU (the section says which)."""
    c = _d(r.get("cost"))
    unit = unit_of(r)
    key = "cpu" if unit == "CPU" else "gpu"
    total = num(c.get(f"total_{key}_hours"))
    failed, rejected = num(c.get(f"failed_{key}_hours")), num(c.get(f"rejected_{key}_hours"))
    useful = None if total is None else total - (failed or 0.0) - (rejected or 0.0)

    def share(x: float | None) -> str:
        return pct(x / total) if x is not None and total else DASH

    rows = [
        ["Total", gpuh(total), share(total)],
        ["  completed and accepted", gpuh(useful), share(useful)],
        ["  failed (OOM, crash, timeout)", gpuh(failed), share(failed)],
        ["  rejected by the verifier", gpuh(rejected), share(rejected)],
        ["Budget (device-hours)", gpuh(c.get("budget_gpu_hours")), DASH],
        ["Share of budget used", pct(c.get("share_of_budget")), DASH],
    ]
    note = ("Trials ran on the GPU: time is booked as GPU-hours (wall time × GPUs per trial)." if unit == "GPU" else
            "Trials ran on the CPU (no GPU): time is booked as CPU-hours (wall time × one slot per trial), not as "
            "GPU-hours; the budget counts them.")
    out = (f"## Cost ledger\n\n{note}\n\n"
           + table([f"{unit}-hours", f"{unit}-h", "Share of total"], rows, right=(1, 2)))
    stages = [s for s in _l(c.get("by_stage")) if isinstance(s, dict)]
    srows = [[text(s.get("stage")), text(s.get("failure_class") or "none"), text(s.get("entries")),
              gpuh(s.get(f"{key}_hours")), share(num(s.get(f"{key}_hours"))), text(s.get("llm_tokens"))]
             for s in stages]
    stop = _d(c.get("at_search_stop"))
    if stop:
        out += (f"\n\nThe search stopped when one more trial would not fit: {gpuh(stop.get('spent'))} spent, "
                f"{text(stop.get('in_flight'))} in flight at ~{gpuh(stop.get('per_search_trial'))} each, "
                f"{gpuh(stop.get('reserve'))} reserved for the back-to-back promotion re-runs "
                f"(committed {gpuh(stop.get('committed'))} of {gpuh(stop.get('budget'))}), unless the trial budget "
                f"ran out first.")
    conc = _d(r.get("concurrency"))
    if num(conc.get("peak")):
        mean = num(conc.get("mean"))
        out += (f"\n\nConcurrency: up to {text(conc.get('peak'))} search trials ran at once"
                + (f" (time-weighted mean {mean:.2f})." if mean is not None else "."))
    out += "\n\nBy stage and failure class:\n\n" + table(
        ["Stage", "Failure class", "Entries", f"{unit}-h", "Share", "LLM tokens"], srows, right=(2, 3, 4, 5))
    return out


# ------------------------------------------------------------------ memory
MEASURED_OUTCOMES = ("ok", "rejected")


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) or str(a) == str(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _has_setting(t: dict[str, Any], name: str, value: Any) -> bool:
    """Whether trial ``t`` ran with knob ``name`` at ``value`` (or with patch ``value`` for ``patch:...``)."""
    if str(name).startswith("patch:"):
        return str(name)[len("patch:"):] in [str(p) for p in _l(t.get("patches"))] or \
            str(value) in [str(p) for p in _l(t.get("patches"))]
    cfg = _d(t.get("config"))
    if name in cfg:
        return _same(cfg[name], value)
    ch = _d(t.get("changed")).get(name)
    return isinstance(ch, (list, tuple)) and len(ch) == 2 and _same(ch[1], value)


def memory_evidence(r: dict[str, Any], name: str, value: Any) -> tuple[int, int]:
    """``(measured, ooms)``: trials that ran this setting and reported their peak memory, and that ran out of
    memory with it."""
    measured = ooms = 0
    for t in trials_of(r):
        if not _has_setting(t, name, value):
            continue
        if t.get("outcome") == "oom":
            ooms += 1
        elif t.get("outcome") in MEASURED_OUTCOMES and num(t.get("peak_mem_gib")) is not None:
            measured += 1
    return measured, ooms


def memory_confidence(measured: int, gib_v: float | None, sd: float | None) -> str:
    """``high`` / ``medium`` / ``low`` for an estimate backed by ``measured`` runs with posterior SD ``sd``."""
    if measured == 0 or gib_v is None:
        return "none"
    size = abs(gib_v)
    if measured == 1 or sd is None or sd >= size:
        return "low"
    if measured == 2 or sd >= size / 2:
        return "medium"
    return "high"


def memory_section(r: dict[str, Any]) -> str:
    """The censored memory model's per-setting GiB estimates, largest spender first, only for settings some trial
    ran: a number only where a run with that setting reported its peak memory (with how many and a confidence);
    a setting seen only in out-of-memory trials is named without a number (one OOM says the whole configuration
    did not fit, not how much this setting adds); settings never run are listed apart, never as "neutral"."""
    rows_in = [m for m in _l(r.get("memory_table")) if isinstance(m, dict)]
    any_peak = any(num(t.get("peak_mem_gib")) is not None for t in trials_of(r))
    if not rows_in or not any_peak:
        why = ("no trial reported peak memory" + (" (CPU trials)" if unit_of(r) == "CPU" else "")
               if not any_peak else "the memory model was not fitted")
        return f"## Memory model\n\nNo memory data: {why}, so no per-setting estimates are shown."
    rows_in.sort(key=lambda m: (num(m.get("gib")) is None, -(num(m.get("gib")) or 0.0)))
    rows, never = [], []
    for m in rows_in:
        name, value = m.get("name"), m.get("value")
        measured, ooms = memory_evidence(r, str(name), value)
        label = f"{text(name)}={text(value, 40)}"
        if measured == 0 and ooms == 0:
            never.append(label)
            continue
        g, sd = num(m.get("gib")), num(m.get("sd"))
        runs = f"{measured} measured" + (f", {ooms} OOM" if ooms else "")
        if measured == 0:
            rows.append([text(name), text(value, 40), DASH, DASH, "ran out of memory", runs,
                         "none (no run with it completed)"])
            continue
        cls = text(m.get("class"))
        if g is not None and sd is not None and abs(g) < sd:
            cls = "within noise"
        rows.append([text(name), text(value, 40), gib(g), DASH if sd is None else f"±{sd:.2f}", cls, runs,
                     memory_confidence(measured, g, sd)])
    out = ("## Memory model\n\nEstimated change in per-GPU peak memory for each setting relative to the reference "
           "(right-censored Tobit model fitted to all trials, OOMs included), for settings a trial ran; a number "
           "only where a run with the setting reported its peak memory:\n\n"
           + table(["Knob", "Value", "GiB", "SD", "Class", "Runs", "Confidence"], rows, right=(2, 3)))
    if never:
        out += "\n\nNever run, so not estimated: " + ", ".join(never) + "."
    return out


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


_LOG_REF = re.compile(r" \(log: (?P<path>[^)]*)\)$")
_TRIAL_DIR = re.compile(r"trials/(?P<dir>[0-9a-f]{16})/out/(?P<file>[^/]+)$")
_JSON_TAIL = re.compile(r"(?P<head>.*?)(?P<json>[\[{]\s*\".*)$")


def readable_reason(reason: Any, limit: int = 200) -> str:
    """A trial's reason for a table cell: a raw JSON line (a job printing its configuration) folded to
    ``{JSON, N chars}``, the log path shortened to ``trials/<dir>/out/job.log``, the text cut before the log
    reference so the reference survives."""
    if not isinstance(reason, str) or not reason:
        return text(reason, limit)
    log = ""
    m = _LOG_REF.search(reason)
    if m:
        reason = reason[:m.start()]
        d = _TRIAL_DIR.search(m.group("path"))
        log = f" (log: trials/{d.group('dir')}/out/{d.group('file')})" if d else f" (log: {m.group('path')})"
    j = _JSON_TAIL.match(reason)
    if j and len(j.group("json")) > 40:
        reason = f"{j.group('head')}{{JSON, {len(j.group('json'))} chars}}"
    return f"{text(reason, max(20, limit - len(log)))} {text(log, 200)}" if log else text(reason, limit)


def trial_note(t: dict[str, Any]) -> str:
    """The last column of the trial table: ``L2: reason`` for rejections, else the reason (readable)."""
    layer, reason = t.get("first_failed_layer"), t.get("reason")
    if layer:
        return readable_reason(f"{layer}: {reason}" if reason else str(layer))
    return readable_reason(reason)


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


def failure_kinds(r: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The search trials the search saw fail (crashed or rejected: an OOM is the memory model's), grouped by
    failure signature as the search's failure ledger groups them (``failures.failure_signature`` of the status
    and reason the search was told, ``failures.told_failure``), in
    order of each kind's first trial."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for t in trials_of(r):
        outcome = str(t.get("outcome") or "")
        if t.get("stage") != "search" or outcome in ("ok", "oom", "cancelled", ""):
            continue
        kinds.setdefault(failure_signature(*told_failure(outcome, str(t.get("reason") or ""))), []).append(t)
    return list(kinds.items())


def _setting(s: Any) -> str:
    return text(s, 80)


def failures_section(r: dict[str, Any]) -> str:
    """The search's failures by kind, and what its failure ledger concluded from them (``result["search"]``:
    pairs never run together, requirements, settings excluded after OOMs, banned patches)."""
    kinds = failure_kinds(r)
    search = r.get("search") if isinstance(r.get("search"), dict) else {}
    out = ["## Failures", ""]
    if not kinds:
        out.append("No search trial crashed or was rejected.")
    else:
        n = sum(len(ts) for _, ts in kinds)
        out += [f"{n} search trial{'s' if n != 1 else ''} failed in {len(kinds)} way{'s' if len(kinds) != 1 else ''}. "
                "Failures whose errors differ only in numbers, addresses and paths are one kind; the search "
                "blames a pair of settings only on the evidence of failures of the same kind.", "",
                table(["Kind", "Trials", "Error (first trial)"],
                      [[text(ts[0].get("outcome")), ", ".join(f"#{text(t.get('seq'))}" for t in ts),
                        trial_note(ts[0])] for _, ts in kinds])]
    rules = [f"- never run together: {' & '.join(_setting(x) for x in _l(t))}" for t in _l(search.get("banned_tuples"))]
    rules += [f"- {_setting(q[0])} runs only beside {_setting(q[1])}" for q in _l(search.get("requirements"))
              if isinstance(q, list) and len(q) == 2]
    rules += [f"- {_setting(x)} excluded after out-of-memory failures with every saver tried"
              for x in _l(search.get("excluded"))]
    rules += [f"- patch {_setting(p)} banned ({_setting(why)})" for p, why in _d(search.get("banned_patches")).items()]
    if rules:
        out += ["", "What the search concluded (its failure ledger when the campaign ended):", "", *rules]
    elif search.get("error"):
        out += ["", f"The search could not be rebuilt to show its conclusions: {text(search.get('error'), 200)}"]
    return "\n".join(out)


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


def experience_section(r: dict[str, Any]) -> str:
    """The doctor's experience-bank coverage (``result["experience"]``): one grade per searched knob (covered,
    partial, null, unobserved; controller/experience/retrieval.py), the source campaigns and the rules carried from
    their failures (``rules``, :func:`~infrarsi.controller.experience.doctor.carried_rules`); empty when absent."""
    cov = _d(r.get("experience"))
    grades = _d(cov.get("grades"))
    if not grades:
        return ""
    counts = Counter(str(g) for g in grades.values())
    head = ", ".join(f"{counts[g]} {g}" for g in ("covered", "partial", "null", "unobserved") if counts[g])
    lines = ["### Experience bank", "",
             f"Coverage of the {len(grades)} searched knobs at doctor time: {head}"
             + (f" (from {', '.join(str(x) for x in _l(cov.get('sources')))})" if _l(cov.get("sources")) else "")
             + ".", "", "| Knob | Coverage |", "|---|---|"]
    lines += [f"| {k} | {g} |" for k, g in sorted(grades.items())]
    pooled = [str(x) for x in _l(cov.get("pooled"))]
    if pooled:
        lines += ["", "Values filed under one canonical value, so the bank pools their records (give one its own "
                  "value under `canonical:` in the contract to keep them apart):", ""] + [f"- {x}" for x in pooled]
    rules = [str(x) for x in _l(cov.get("rules"))]
    if rules:
        lines += ["", "Rules carried from other campaigns' failures (known conflicts are never run; a suspect is "
                  "avoided until this campaign explains its crash otherwise; a setting that needs a partner runs "
                  "only beside it):", ""] + [f"- {x}" for x in rules]
    return "\n".join(lines)

