"""REPORT.md's ``## Proposers`` section: which proposer produced which patch, and what the proposers cost.

Pure: reads result.json's ``proposers`` object (see :func:`infrarsi.controller.campaign.proposing.proposers_result`)
and ``cost.total_gpu_hours``; never raises on null or missing fields.
"""

from __future__ import annotations

from typing import Any

from infrarsi.controller.report.fmt import DASH, gpuh, num, table, text


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _int(x: Any) -> str:
    v = num(x)
    return DASH if v is None else f"{int(v):,}"


def _usd(x: Any) -> str:
    v = num(x)
    return "not priced" if v is None else f"${v:.4f}" if v < 1 else f"${v:,.2f}"


def _gain(x: Any) -> str:
    v = num(x)
    return DASH if v is None else f"{v:+.3f}"


def proposers_section(r: dict[str, Any]) -> str:
    """The proposers' ledger (requests, tokens, USD when priced, wall time) next to the campaign's GPU-hours, the
    provenance and fate of every patch, and the knob priors proposers contributed."""
    p = _d(r.get("proposers"))
    by = [b for b in _l(p.get("by_proposer")) if isinstance(b, dict)]
    patches = [x for x in _l(p.get("patches")) if isinstance(x, dict)]
    tot = _d(p.get("totals"))
    cost = _d(r.get("cost"))
    gpu_h = cost.get("total_gpu_hours")
    cpu_h = num(cost.get("total_cpu_hours"))
    beside = f"{gpuh(gpu_h)} GPU-hours" + (f" and {gpuh(cpu_h)} CPU-hours" if cpu_h else "")
    out = ["## Proposers", ""]
    if not by and not any(x.get("kind") not in (None, "folder") for x in patches):
        out.append("Only the contract's patch folder proposed patches; no language model or agent was asked "
                   "(add a `proposers:` section to the contract, docs/proposers.md).")
    else:
        out.append(f"Proposer cost: {_int(tot.get('requests'))} requests, {_int(tot.get('tokens_in'))} tokens in, "
                   f"{_int(tot.get('tokens_out'))} tokens out, {_usd(tot.get('usd'))}, "
                   f"{num(tot.get('wall_s')) or 0.0:.1f} s wall time — beside {beside} of trials.")
        out += ["", table(["Proposer", "Kind", "Model", "Requests", "Failed", "Tokens in", "Tokens out", "USD",
                           "Wall s"],
                          [[text(b.get("proposer")), text(b.get("kind")), text(b.get("model"), 40),
                            _int(b.get("requests")), _int(b.get("failed")), _int(b.get("tokens_in")),
                            _int(b.get("tokens_out")), _usd(b.get("usd")),
                            DASH if num(b.get("wall_s")) is None else f"{num(b.get('wall_s')):.1f}"] for b in by],
                          right=(3, 4, 5, 6, 7, 8))]
    rows = [[text(x.get("name"), 60), text(x.get("proposer")), text((x.get("prompt_digest") or "")[:12]),
             _gain(x.get("claimed_gain")), _gain(x.get("prior_mean")), text(x.get("status"), 60),
             text((x.get("reason") if x.get("reason") else x.get("rationale")), 90)] for x in patches]
    out += ["", "Patches by proposer (claimed gain and prior mean are log-speedups; the prior is the claim capped "
                "and halved, then revised by measurements):", "",
            table(["Patch", "Proposer", "Prompt digest", "Claimed", "Prior", "Status", "Rationale / reason"], rows,
                  right=(3, 4))]
    rounds = [x for x in _l(p.get("rounds")) if isinstance(x, dict)]
    failed = [x for x in rounds if not x.get("ok")]
    if failed:
        out += ["", "Failed requests (the search went on without them):", ""]
        out += [f"- {text(x.get('proposer'))} ({text(x.get('kind'))}): {text(x.get('reason'), 200)}" for x in failed]
    priors = [x for x in _l(p.get("priors")) if isinstance(x, dict)]
    if priors:
        names = sorted({n for x in priors for n in _l(x.get("proposers"))})
        out += ["", f"Knob priors from {', '.join(names) or 'proposers'}: {len(priors)} knob values entered the time "
                    f"and memory models (floored and revised empirically); {len(_l(p.get('priors_dropped')))} "
                    f"named no searched value and were dropped."]
    return "\n".join(out)
