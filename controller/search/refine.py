"""Refining an incumbent from transferred experience instead of escaping it (issue 13).

A search given retrieved experience from another GPU starts close to the target's peak: the bank's covered
kernel settings are in its first start, and what is left are the levers only the target can show, the knobs the
bank could not grade ``covered`` here (balance mechanisms and FP8 measured on another SKU, whose sign may flip;
knobs no record mentions).  Before this module the search treated such a start like any other incumbent: the
deliberate probes after it (the contrarian probe, and until session 15 a transfer check) do not improve on it, so after
``stall_trials`` of them it went into escape mode, whose warm restarts and trust-region escapes change up to
three big knobs at once (dropping covered kernel settings, adding TP/FP8) before the one missing lever was ever
tried on its own (seed-by-seed traces: ``bench/RESULTS.md``, "Experience transfer: the search side").

:func:`refine_sweep` runs instead of the escape, while it has something to propose:

* when the incumbent came from another start and lacks some of the experience start's covered settings, the
  incumbent with all of them grafted on (one move, savers added when the memory model predicts an OOM);
* every one-knob neighbour along an *uncovered* knob (any other value, the reference included) whose setting
  was never measured apart on this target (no two ok trials differ in exactly that setting).

Ranked by the pool's acquisition (the UCB gain over the incumbent weighted by p_feasible), keeping only likely
feasible moves whose two-sigma upside clears the incumbent by the gate.  Each uncovered setting is swept until
it has been measured apart once, so the sweep is bounded by their number; when a move improves the incumbent the
sweep continues from the new one.  Once nothing is left, the escape runs as before.

Inert without transferred experience (:func:`active`): a cold search (and retrieval mode ``all``, which grades
every record ``covered`` at distance 0) never yields from it, so its proposals are unchanged.  Pure in the view
(history, models, busy set); nothing here mutates.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from infrarsi.controller.search.moves import complete_bundle, with_setting
from infrarsi.controller.search.space import Candidate, Setting
from infrarsi.controller.search.view import SearchView


def active(view: SearchView) -> bool:
    """True when the search was given *transferred* experience: an experience start (``"config"``) and at least
    one retrieved setting record measured elsewhere, i.e. graded ``partial`` or retrieved at distance > 0 (see
    :func:`infrarsi.controller.experience.retrieval.setting_priors`)."""
    exp = view.experience
    return any("config" in r for r in exp) and any(
        "knob" in r and (r.get("coverage") == "partial" or float(r.get("distance") or 0.0) > 0) for r in exp)


def covered_knobs(view: SearchView) -> set[str]:
    """Knobs with at least one setting whose retrieved prior is ``covered`` and signed (carries a speed prior)."""
    return {str(r["knob"]) for r in view.experience
            if "knob" in r and r.get("coverage") == "covered" and "prior_sd" in r}


def experience_start(view: SearchView) -> dict[str, object]:
    """The best experience start's values on this space's knobs (mapped as :func:`proposals.initial_starts` maps
    them; a value the knob lacks is left out)."""
    exp = [r for r in view.experience if "config" in r]
    if not exp:
        return {}
    best = max(exp, key=lambda r: float(r.get("speedup", 1.0)))
    return {k.name: best["config"][k.name] for k in view.space.knobs
            if k.name in best["config"] and best["config"][k.name] in k.values}


def measured_apart(view: SearchView, s: Setting) -> bool:
    """Whether two ok trials of this campaign (the reference counting as one) differ in exactly setting ``s``."""
    ok = [c.settings(view.space) for c, o in view.history if o.status == "ok"] + [frozenset()]
    without = {x - {s} for x in ok if s in x}
    return any(y in without for y in ok if s not in y)


def refine_sweep(view: SearchView, busy: set[Candidate]) -> Iterator[tuple[str, Candidate]]:
    """The refine moves of the incumbent, best acquisition first (see the module docstring).

    Only when :func:`active`, the search is stalled (``stall >= stall_trials``) and the incumbent is not the
    reference.  A one-knob neighbour is built by :func:`moves.with_setting` (conflict reverts, a partner the
    ledger found the setting needs, and a saver when the memory model predicts an OOM);
    :func:`moves.complete_bundle` adds savers to the graft.  Yields ``("refine", candidate)``; the controller's
    admission filter still applies."""
    if not active(view) or view.incumbent.is_reference(view.space):
        return
    if view.stall < int(view.tune["stall_trials"]):
        return
    inc = view.incumbent
    covered = covered_knobs(view)
    cands: list[Candidate] = []

    def fresh(cand: Candidate) -> bool:
        return not (cand == inc or cand.is_reference(view.space) or view.is_told(cand)
                    or view.is_outstanding(cand) or cand in busy or cand in cands)

    graft = {k: v for k, v in experience_start(view).items() if k in covered and v != inc.value(k)}
    if graft:
        cand = inc.with_values(graft)
        if float(view.predict([cand])[2][0]) < 0.5:
            cand, _ = complete_bundle(view, cand, set())
        if fresh(cand):
            cands.append(cand)
    for k in view.space.knobs:
        if k.name in covered:
            continue
        cur = inc.value(k.name)
        for v in k.values:
            if v == cur:
                continue
            s = (k.name, v) if v != k.reference else (k.name, cur)  # the setting this move measures
            if measured_apart(view, s):
                continue
            cand = with_setting(view, inc, (k.name, v))
            if fresh(cand):
                cands.append(cand)
    if not cands:
        return
    pool = view.pool
    rows = np.vstack([pool.row_of(c) for c in cands])
    acq, mu, sd, p = pool.score(rows, inc.patches)
    ok = p >= float(view.tune["min_p_feasible"])
    order = sorted((i for i in range(len(cands)) if ok[i] and mu[i] + 2 * sd[i] >= view.incumbent_y + view.gate),
                   key=lambda i: (-float(acq[i]), cands[i].signature))
    for i in order:
        yield "refine", Candidate(cands[i].config, inc.patches)


__all__ = ["active", "covered_knobs", "experience_start", "measured_apart", "refine_sweep"]
