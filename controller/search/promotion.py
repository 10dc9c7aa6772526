"""Final promotion by back-to-back re-runs against the reference (paper section 3.4)."""

from __future__ import annotations

import math

from infrarsi.controller.search.space import Candidate, Promotion


def decide_promotion(reruns: dict[Candidate, list[tuple[float, float]]], margin: float) -> Promotion:
    """Pick the candidate with the largest paired speedup that clears ``margin``.

    ``reruns`` maps a candidate to pairs ``(reference_window_mean_s, candidate_window_mean_s)``
    measured back to back.  The paired speedup is ``exp(mean(ln(ref / cand)))``; it must exceed
    ``1 + margin`` (margin = exp(2 sigma_pair) - 1).  With no candidate clearing it the reference
    is kept: ``Promotion(None, 1.0, reason)``.
    """
    best: tuple[float, str, Candidate] | None = None
    notes = []
    for cand, pairs in reruns.items():
        logs = [math.log(r / c) for r, c in pairs if r and c and r > 0 and c > 0]
        if not logs:
            notes.append(f"{cand.signature[:10]}: no valid re-run pair")
            continue
        sp = math.exp(sum(logs) / len(logs))
        notes.append(f"{cand.signature[:10]}: {sp:.4f}x over {len(logs)} pairs")
        if sp - 1.0 > margin and (best is None or (sp, cand.signature) > (best[0], best[1])):
            best = (sp, cand.signature, cand)
    if best is None:
        return Promotion(None, 1.0, f"nothing cleared the promotion margin {margin:.4f}; kept the reference ("
                         + "; ".join(notes) + ")" if notes else "no candidate to re-run; kept the reference")
    return Promotion(best[2], best[0], f"paired re-runs {best[0]:.4f}x > 1+{margin:.4f} (" + "; ".join(notes) + ")")
