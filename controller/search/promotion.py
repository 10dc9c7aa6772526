"""Final promotion by back-to-back re-runs against the reference (paper section 3.4), with THE statistic.

Everything numeric comes from :mod:`infrarsi.verifier.speed` (docs/verifier.md, "Verified speedup"):

* a pair is ``(T_ref, T_cand)``, each a run's window step time T (observations store T);
* a candidate's speedup is ``exp(mean_j ln(T_ref,j / T_cand,j))`` (:func:`~infrarsi.verifier.speed.paired_speedup`);
* the margin is ``exp(2 * sigma_bound) - 1`` where sigma_bound is the 90% upper confidence bound of sigma_pair,
  floored at 0.5%, pooled from the calibration's reference runs *and every repeat the campaign made*: the
  reference re-runs of the pairs, and each candidate's search run(s) with its re-runs
  (:func:`promotion_noise`);
* the gate is :func:`~infrarsi.verifier.speed.clears` -- the very function the L5 ``speed_reproduces`` invariant
  calls, so the promotion and the gate cannot disagree on the same pairs and margin.

A plain float ``margin`` is accepted for callers without a noise model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from infrarsi.controller.search.space import Candidate, Outcome, Promotion
from infrarsi.verifier import speed
from infrarsi.verifier.speed import NoiseBound, PairedSpeedup

Reruns = Mapping[Candidate, Sequence[tuple[float, float]]]
#: source labels of the evidence pooled into the noise bound
REFERENCE_RUNS, REFERENCE_RERUNS, CANDIDATE_REPEATS = "reference runs", "reference re-runs", "candidate repeats"


@dataclass(frozen=True)
class PromotionEvidence:
    """What the decision rested on: the noise bound (None for a fixed margin), the margin, and per candidate
    signature its paired speedup (None: no valid pair)."""

    bound: NoiseBound | None
    margin: float
    paired: Mapping[str, PairedSpeedup | None]

    def to_dict(self) -> dict[str, Any]:
        """JSON for result.json: ``noise`` (the bound), ``promotion_margin`` and per-candidate speedups with their
        interval (exp(mean -/+ 2 sigma_bound / sqrt(pairs)))."""
        cands: dict[str, Any] = {}
        for sig, ps in self.paired.items():
            if ps is None:
                cands[sig] = None
                continue
            row: dict[str, Any] = {"speedup": ps.speedup, "log_speedup": ps.log_speedup, "pairs": ps.n_pairs,
                                   "log_diffs": list(ps.log_diffs)}
            if self.bound is not None:
                row["interval"] = list(ps.interval(self.bound.sigma_bound))
            cands[sig] = row
        return {"noise": None if self.bound is None else self.bound.to_dict(), "promotion_margin": self.margin,
                "candidates": cands}


def search_evidence(history: Iterable[tuple[Candidate, Outcome]]) -> dict[Candidate, list[float]]:
    """Window step times of every ok search run, per candidate (the free repeats the search already paid for)."""
    out: dict[Candidate, list[float]] = {}
    for cand, o in history:
        t = o.step_time_s
        if o.status == "ok" and t is not None and math.isfinite(t) and t > 0:
            out.setdefault(cand, []).append(float(t))
    return out


def promotion_noise(noise: Any, reruns: Reruns,
                    search_runs: Mapping[Candidate, Sequence[float]] | None = None) -> NoiseBound:
    """The noise bound from the calibrated reference runs (``noise``: a ``NoiseModel``) plus every repeat in
    ``reruns`` (reference re-runs join the reference group; each candidate's re-runs join its search runs)."""
    ref = [math.log(r) for pairs in reruns.values() for r, _ in pairs if _ok(r)]
    extra: list[tuple[str, list[float]]] = [(REFERENCE_RUNS, ref)] if ref else []
    for cand in sorted(reruns, key=lambda c: c.signature):
        reps = [math.log(t) for t in (search_runs or {}).get(cand, ()) if _ok(t)]
        reps += [math.log(c) for _, c in reruns[cand] if _ok(c)]
        if reps:
            extra.append((CANDIDATE_REPEATS, reps))
    bound = noise.bound(extra)
    src = dict(bound.sources)
    # report reference re-runs apart from the doctor's runs (they were pooled as one configuration)
    if ref:
        src[REFERENCE_RUNS] = src.get(REFERENCE_RUNS, 0) - len(ref)
        src[REFERENCE_RERUNS] = len(ref)
    return NoiseBound(**{**bound.to_dict(), "sources": src})


def _ok(t: Any) -> bool:
    return isinstance(t, (int, float)) and math.isfinite(t) and t > 0


def decide_promotion_detailed(reruns: Reruns, margin: Any,
                              search_runs: Mapping[Candidate, Sequence[float]] | None = None
                              ) -> tuple[Promotion, PromotionEvidence]:
    """Pick the candidate with the largest paired speedup that clears the margin; see the module docstring.

    ``reruns`` maps a candidate to pairs ``(T_ref, T_cand)`` measured back to back; ``margin`` is a calibrated
    ``NoiseModel`` (the margin then comes from the pooled bound) or a float (that fixed margin); ``search_runs`` holds the
    candidates' window step times from the search (:func:`search_evidence`).  With no candidate clearing the
    margin the reference is kept: ``Promotion(None, 1.0, reason)``.  Ties break on the signature.
    """
    bound: NoiseBound | None = None
    if isinstance(margin, (int, float)):
        margin = float(margin)
    elif not callable(getattr(margin, "bound", None)):  # a noise-like object without evidence: its margin
        margin = float(margin.promotion_margin)
    else:
        bound = promotion_noise(margin, reruns, search_runs)
        margin = bound.margin
    best: tuple[float, str, Candidate] | None = None
    notes: list[str] = []
    paired: dict[str, PairedSpeedup | None] = {}
    for cand in sorted(reruns, key=lambda c: c.signature):
        ps = speed.paired_speedup(reruns[cand])
        paired[cand.signature] = ps
        if ps is None:
            notes.append(f"{cand.signature[:10]}: no valid re-run pair")
            continue
        notes.append(f"{cand.signature[:10]}: {ps.speedup:.4f}x over {ps.n_pairs} pairs")
        if speed.clears(ps, margin) and (best is None or (ps.speedup, cand.signature) > (best[0], best[1])):
            best = (ps.speedup, cand.signature, cand)
    ev = PromotionEvidence(bound, margin, paired)
    basis = "" if bound is None else f"; {bound.describe()}"
    if best is None:
        if not notes:
            return Promotion(None, 1.0, "no candidate to re-run; kept the reference"), ev
        return Promotion(None, 1.0, f"nothing cleared the promotion margin {margin:.4f}; kept the reference ("
                         + "; ".join(notes) + basis + ")"), ev
    return Promotion(best[2], best[0], f"paired re-runs {best[0]:.4f}x > 1+{margin:.4f} ("
                     + "; ".join(notes) + basis + ")"), ev


def decide_promotion(reruns: Reruns, margin: Any, search_runs: Mapping[Candidate, Sequence[float]] | None = None
                     ) -> Promotion:
    """:func:`decide_promotion_detailed` without the evidence record."""
    return decide_promotion_detailed(reruns, margin, search_runs)[0]
