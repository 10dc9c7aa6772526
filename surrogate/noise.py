"""Online noise calibration (paper section 4.1, "Online Noise Calibration").

From two or more reference runs (per-update step times, warm-up trimmed) this
module estimates ``sigma_pair``: the standard deviation of the *paired*
log-step-time difference ln(T_a / T_b) between two independent runs of the
same configuration, where T is a run's steady-state window statistic.  The
search derives two thresholds from it:

* ``big_knob_gate = max(0.02, 2 * sigma_pair)``: a lever whose log-speedup
  cannot clear this is not a "big knob"; also the stall threshold.
* ``promotion_margin = exp(2 * sigma_pair_bound) - 1``: the relative speedup
  that fresh back-to-back promotion re-runs must exceed (sigma_pair_bound is
  the 90% upper confidence bound of sigma_pair, floored at 0.5%).

The statistic itself is defined once, in :mod:`infrarsi.verifier.speed` (stdlib only; this is the one
public verifier module the surrogate imports): per run, c_r = ln of the mean step time after winsorizing rare
stragglers; sigma_pair pools re-run differences of the c_r with within-run split halves (h_r) and is never
below the re-run spread or the white-noise floor 2 * mean_r(s_r^2 / n_r) (s_r the robust per-step SD of
ln t).  The promotion margin derives from the *upper bound* of sigma_pair for the degrees of freedom it came
from (90% chi-square bound, floored at ``speed.MIN_SIGMA_PAIR``); the big-knob gate, a search heuristic,
from the point estimate.  ``speed.pool_noise`` adds the campaign's later repeats (re-runs) to the same pool.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike

from infrarsi.surrogate.errors import SurrogateError
from infrarsi.verifier import speed
from infrarsi.verifier.speed import NoiseBound, WindowSummary

#: Smallest big-knob gate in log-speedup units (paper: max(0.02, 2 sigma_pair)).
MIN_BIG_KNOB_GATE = 0.02
#: Fewest post-warm-up steps a reference run must have (two per split half).
MIN_STEPS_PER_RUN = 4
#: source label of the doctor's reference runs in a :class:`~infrarsi.verifier.speed.NoiseBound`
REFERENCE_RUNS = "reference runs"


@dataclass(frozen=True)
class NoiseModel:
    """Calibrated paired measurement noise, with a record of how it was computed.

    Attributes:
        sigma_pair: point estimate of the SD of the paired log-step-time difference of two runs.
        big_knob_gate: max(0.02, 2 * sigma_pair), in log-speedup units (search heuristic).
        promotion_margin: exp(2 * sigma_pair_bound) - 1, a relative speedup.
        sigma_pair_ucb: 90% upper confidence bound of sigma_pair for ``dof`` degrees of freedom.
        sigma_pair_bound: max(sigma_pair_ucb, speed.MIN_SIGMA_PAIR): what the promotion margin uses.
        dof: degrees of freedom of sigma_pair.
        n_runs: number of reference runs used.
        n_steps: steps per run (after warm-up trimming, before winsorizing).
        window_means_s: plain arithmetic window mean step time per run (s), nothing clipped.
        window_log_means: the window statistic c_r per run (ln of the winsorized mean step time).
        split_half_diffs: h_r per run (log units).
        spikes_clipped: isolated stragglers winsorized per run.
        step_sd_log: robust per-step SD of log step time per run.
        sigma_between: sqrt(v_between), from paired re-run differences.
        sigma_split_half: sqrt(mean_r h_r^2 / 2).
        sigma_pooled: sqrt(pooled).
        sigma_floor: within-window white-noise floor.
        source: which term set sigma_pair: "pooled", "between" or "floor".
    """

    sigma_pair: float
    big_knob_gate: float
    promotion_margin: float
    sigma_pair_ucb: float
    sigma_pair_bound: float
    dof: int
    n_runs: int
    n_steps: tuple[int, ...]
    window_means_s: tuple[float, ...]
    window_log_means: tuple[float, ...]
    split_half_diffs: tuple[float, ...]
    spikes_clipped: tuple[int, ...]
    step_sd_log: tuple[float, ...]
    sigma_between: float
    sigma_split_half: float
    sigma_pooled: float
    sigma_floor: float
    source: str

    @property
    def floor_applied(self) -> bool:
        """True when the white-noise floor, not the data spread, set sigma_pair."""
        return self.source == "floor"

    def bound(self, extra: Sequence[tuple[str, Sequence[float]]] = ()) -> NoiseBound:
        """The noise bound from these reference runs plus ``extra`` groups of repeated window statistics
        (``(source label, [c, ...])``, each group one configuration; see :func:`infrarsi.verifier.speed.pool_noise`).
        An extra group labelled :data:`REFERENCE_RUNS` is merged with the reference runs (same configuration)."""
        ref = list(self.window_log_means)
        groups: list[tuple[str, Sequence[float]]] = []
        for label, vals in extra:
            if label == REFERENCE_RUNS:
                ref += list(vals)
            else:
                groups.append((label, vals))
        return speed.pool_noise([(REFERENCE_RUNS, ref)] + groups, self.split_half_diffs, self.sigma_floor ** 2)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field (tuples become lists)."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        out["floor_applied"] = self.floor_applied
        return out

    def describe(self) -> str:
        """A few human-readable lines for reports (percentages of step time)."""
        means = ", ".join(f"{m:.6g}" for m in self.window_means_s)
        return "\n".join(
            [
                f"sigma_pair = {100 * self.sigma_pair:.3f}% (set by {self.source}; "
                f"{self.n_runs} reference runs, {sum(self.n_steps)} steps, {self.dof} dof)",
                f"sigma_pair bound = {100 * self.sigma_pair_bound:.3f}% (90% bound "
                f"{100 * self.sigma_pair_ucb:.3f}%, minimum {100 * speed.MIN_SIGMA_PAIR:.2f}%)",
                f"big-knob gate = {100 * self.big_knob_gate:.2f}% log-speedup, "
                f"promotion margin = {100 * self.promotion_margin:.3f}%",
                f"components: re-run pairs {100 * self.sigma_between:.3f}%, "
                f"split-half {100 * self.sigma_split_half:.3f}%, pooled "
                f"{100 * self.sigma_pooled:.3f}%, white floor {100 * self.sigma_floor:.3f}%",
                f"window means (s): {means}; spikes clipped per run: "
                f"{list(self.spikes_clipped)}",
            ]
        )


def _summary(run: ArrayLike, name: str, min_steps: int = 1) -> WindowSummary:
    t = np.asarray(run, dtype=np.float64).reshape(-1)
    if t.size < min_steps:
        raise SurrogateError(f"{name}: needs at least {min_steps} steps, got {t.size}")
    try:
        return speed.window_summary(t.tolist(), name)
    except speed.SpeedError as exc:
        raise SurrogateError(str(exc)) from None


def window_log_mean(step_times: ArrayLike) -> float:
    """The window statistic of one run, c = ln T (:func:`infrarsi.verifier.speed.window_summary`).

    ln(T0/T) for two runs is ``window_log_mean(ref) - window_log_mean(cand)``.  Raises SurrogateError on an
    window of fewer than 4 steps or a non-finite / non-positive time.
    """
    return _summary(step_times, "step_times", MIN_STEPS_PER_RUN).log_stat


def paired_log_speedup(reference_steps: ArrayLike, candidate_steps: ArrayLike) -> float:
    """ln(T_ref / T_cand) from two runs' step times, with the one window statistic.

    Positive means the candidate is faster.  Raises SurrogateError on invalid step times.
    """
    return window_log_mean(reference_steps) - window_log_mean(candidate_steps)


def calibrate(reference_runs: Sequence[np.ndarray]) -> NoiseModel:
    """Estimate paired log-step-time noise from repeated reference runs.

    Args:
        reference_runs: two or more 1-D arrays; each holds one reference run's
            per-update step times in seconds, warm-up already trimmed, at least
            4 steps each, all finite and > 0.  Runs may differ in length.

    Returns:
        A frozen :class:`NoiseModel` (sigma_pair, its bound, gate, margin, and
        the intermediate quantities).

    Raises:
        SurrogateError: fewer than two runs, or a run that fails the checks.
    """
    if isinstance(reference_runs, np.ndarray) and reference_runs.ndim == 1:
        raise SurrogateError("reference_runs: expected a sequence of runs, got one 1-D array")
    runs = [_summary(r, f"reference_runs[{i}]", MIN_STEPS_PER_RUN) for i, r in enumerate(reference_runs)]
    k = len(runs)
    if k < 2:
        raise SurrogateError(f"reference_runs: needs at least 2 runs, got {k}")
    c = np.asarray([w.log_stat for w in runs])
    h = np.asarray([w.half_diff for w in runs])
    v_between = 2.0 * float(np.var(c, ddof=1))
    v_split = float(np.mean(h * h) / 2.0)
    pooled = ((k - 1) * v_between + float(np.sum(h * h)) / 2.0) / (2 * k - 1)
    floor = 2.0 * float(np.mean([w.sd_log ** 2 / w.n if math.isfinite(w.sd_log) else 0.0 for w in runs]))
    b = speed.pool_noise([(REFERENCE_RUNS, c.tolist())], h.tolist(), floor)
    source = b.set_by if b.set_by != "minimum" else ("floor" if floor > max(pooled, v_between) else
                                                      "between" if v_between > pooled else "pooled")
    return NoiseModel(
        sigma_pair=b.sigma_pair,
        big_knob_gate=max(MIN_BIG_KNOB_GATE, 2.0 * b.sigma_pair),
        promotion_margin=b.margin,
        sigma_pair_ucb=b.sigma_ucb,
        sigma_pair_bound=b.sigma_bound,
        dof=b.dof,
        n_runs=k,
        n_steps=tuple(w.n for w in runs),
        window_means_s=tuple(w.plain_mean_s for w in runs),
        window_log_means=tuple(float(x) for x in c),
        split_half_diffs=tuple(float(x) for x in h),
        spikes_clipped=tuple(w.clipped for w in runs),
        step_sd_log=tuple(w.sd_log for w in runs),
        sigma_between=math.sqrt(v_between),
        sigma_split_half=math.sqrt(v_split),
        sigma_pooled=math.sqrt(pooled),
        sigma_floor=math.sqrt(floor),
        source=source,
    )
