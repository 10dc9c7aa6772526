"""Decide the promotion from back-to-back re-runs (the L5 ``speed_reproduces`` gate).

Each promotion candidate was re-run in pairs: the untouched reference, then the candidate, adjacent in time on
the same executor.  A pair counts only when both runs completed and the candidate's re-run passed the verifier.
The decision is the search library's own (:func:`~infrarsi.controller.search.promotion.decide_promotion_detailed`,
what ``SearchController.promote`` calls): the fastest candidate whose paired speedup exp(mean ln(T_ref/T_cand))
clears exp(2 * sigma_bound) - 1, where sigma_bound bounds sigma_pair from the reference runs *and* every repeat
of this campaign (reference re-runs, each candidate's search run and re-runs); otherwise exactly 1.00x, with the
reason.  The L5 ``speed_reproduces`` item is then computed on the same pairs with the same margin (the same
function decides both), and recorded; it can veto only if the two ever disagreed, which is a bug.
"""

from __future__ import annotations

from typing import Any, Sequence

from infrarsi.controller.search.promotion import decide_promotion_detailed, search_evidence
from infrarsi.controller.search.space import Candidate, Promotion
from infrarsi.controller.store.records import ObservationRecord, TrialRecord
from infrarsi.controller.store.stage_records import PlanCandidate
from infrarsi.verifier.judge import speed_reproduces


#: how the speedup in result.json and REPORT.md is computed (docs/verifier.md, "Verified speedup")
STATISTIC = ("speedup = exp(mean over back-to-back pairs of ln(T_ref / T_cand)); T = a run's mean wrapper-clock "
             "step time over the timing window, rare stragglers winsorized; promoted when speedup - 1 > "
             "exp(2 * sigma_bound) - 1, sigma_bound = max(90% upper bound of sigma_pair, 0.5%)")


def decide(ctrl: Any, plan: Sequence[PlanCandidate], done: Sequence[TrialRecord],
           obs: dict[int, ObservationRecord]) -> tuple[Promotion, dict[str, Any]]:
    """``(promotion, details)`` where details is JSON for result.json (pairs, gate item, rejections)."""
    groups: dict[str, dict[str, TrialRecord]] = {}
    for t in done:
        # within a group the first run (by sequence) is the reference, the second the candidate
        g = groups.setdefault(t.group_key or "", {})
        g["ref" if "ref" not in g else "cand"] = t
    reruns: dict[Candidate, list[tuple[float, float]]] = {}
    rejected: list[str] = []
    pairs_json: list[dict[str, Any]] = []
    for p in plan:
        cand = Candidate.from_dict(p.config, p.patches)
        for key, g in sorted(groups.items()):
            if not key.startswith(p.signature[:16]) or "ref" not in g or "cand" not in g:
                continue
            r, k = g["ref"], g["cand"]
            ro, ko = obs.get(r.id), obs.get(k.id)
            row = {"group": key, "reference_trial": r.seq, "candidate_trial": k.seq,
                   "reference_s": ro.step_time_s if ro else None, "candidate_s": ko.step_time_s if ko else None,
                   "candidate_outcome": k.outcome, "reason": k.reason}
            pairs_json.append(row)
            if r.outcome == "ok" and k.outcome == "ok" and ro and ko and ro.step_time_s and ko.step_time_s:
                reruns.setdefault(cand, []).append((ro.step_time_s, ko.step_time_s))
            elif k.outcome == "rejected":
                rejected.append(f"{p.signature[:10]}: {k.reason}")
    evidence = None
    if not plan:
        promo = Promotion(None, 1.0, "no verified candidate beat the reference during the search")
    elif not reruns:
        promo = Promotion(None, 1.0, "no promotion candidate completed a clean back-to-back re-run")
    else:
        promo, evidence = decide_promotion_detailed(reruns, ctrl.noise, search_evidence(ctrl.history))
    margin = evidence.margin if evidence is not None else float(ctrl.noise.promotion_margin)
    gate = None
    if promo.candidate is not None and promo.candidate in reruns:
        pr = reruns[promo.candidate]
        item = speed_reproduces([a for a, _ in pr], [b for _, b in pr], margin)
        gate = {"name": item.name, "layer": item.layer, "status": item.status, "reason": item.reason}
        if item.status != "pass":
            promo = Promotion(None, 1.0, f"L5 speed_reproduces: {item.reason}")
    details = {
        "candidate": None if promo.candidate is None else
        {"config": promo.candidate.as_dict(), "patches": sorted(promo.candidate.patches),
         "signature": promo.candidate.signature},
        "speedup": promo.speedup,
        "reason": promo.reason,
        "pairs": pairs_json,
        "rejected_reruns": rejected,
        "speed_reproduces": gate,
        "promotion_margin": margin,
        "statistic": STATISTIC,
    }
    if evidence is not None:
        ev = evidence.to_dict()
        details["noise"] = ev["noise"]
        details["candidates"] = ev["candidates"]
    elif callable(getattr(ctrl.noise, "bound", None)):
        details["noise"] = ctrl.noise.bound().to_dict()
    return promo, details

