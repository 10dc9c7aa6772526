"""Online noise calibration (paper section 4.1, "Online Noise Calibration").

From two or more reference runs (per-update step times, warm-up trimmed) this
module estimates ``sigma_pair``: the standard deviation of the *paired*
log-step-time difference ln(T_a / T_b) between two independent runs of the
same configuration, where T is a run's steady-state window statistic.  The
search derives two thresholds from it:

* ``big_knob_gate = max(0.02, 2 * sigma_pair)``: a lever whose log-speedup
  cannot clear this is not a "big knob"; also the stall threshold.
* ``promotion_margin = exp(2 * sigma_pair) - 1``: the relative speedup that a
  fresh back-to-back promotion re-run must exceed.

Estimator (all in log space, per run r with n_r steps):

1. Isolated spikes are winsorized: a step more than ``spike_z`` robust
   standard deviations (1.4826 * MAD) from the run median is clipped to that
   bound, but only when such steps are rare (at most ``max(1, spike_frac *
   n_r)`` of them).  Frequent excursions (periodic data-loader or collective
   stalls) are part of the run's noise and are kept.
2. The run's window statistic c_r is the mean of the (winsorized) log step
   times; :func:`window_log_mean` (and :func:`paired_log_speedup` for a
   reference/candidate pair) compute it so that the search can score
   candidates with exactly the same statistic.
3. Paired re-run differences: v_between = mean over run pairs of
   (c_i - c_j)^2 = 2 * var(c, ddof=1), with k - 1 degrees of freedom.
4. Within-run split-half: h_r = mean(first half) - mean(second half);
   h_r^2 / 2 estimates the paired variance of full-window means for
   white step noise, with one degree of freedom per run.
5. pooled = ((k-1) * v_between + sum_r h_r^2 / 2) / (2k - 1).  Because
   split halves cannot see run-level offsets (host contention that lasts a
   whole run), the estimate never goes below v_between itself.
6. White-noise floor: floor = 2 * mean_r(s_r^2 / n_r) with s_r the run's
   robust (MAD) step standard deviation: the expected paired variance if the
   steps were independent white noise, a lower bound for real (correlated)
   step noise that protects against runs agreeing by chance.

sigma_pair = sqrt(max(pooled, v_between, floor)).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike

from infrarsi.surrogate.errors import SurrogateError

#: Smallest big-knob gate in log-speedup units (paper: max(0.02, 2 sigma_pair)).
MIN_BIG_KNOB_GATE = 0.02
#: Fewest post-warm-up steps a reference run must have (two per split half).
MIN_STEPS_PER_RUN = 4
_MAD_TO_SD = 1.482602218505602


@dataclass(frozen=True)
class NoiseModel:
    """Calibrated paired measurement noise, with a record of how it was computed.

    Attributes:
        sigma_pair: SD of the paired log-step-time difference of two runs.
        big_knob_gate: max(0.02, 2 * sigma_pair), in log-speedup units.
        promotion_margin: exp(2 * sigma_pair) - 1, a relative speedup.
        n_runs: number of reference runs used.
        n_steps: steps per run (after warm-up trimming, before winsorizing).
        window_means_s: plain arithmetic window mean step time per run (s).
        window_log_means: the window statistic c_r per run (mean of winsorized
            log step times); exp(c_r) is a robust geometric-mean step time.
        split_half_diffs: h_r per run (log units).
        spikes_clipped: isolated spike steps winsorized per run.
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
                f"{self.n_runs} reference runs, {sum(self.n_steps)} steps)",
                f"big-knob gate = {100 * self.big_knob_gate:.2f}% log-speedup, "
                f"promotion margin = {100 * self.promotion_margin:.3f}%",
                f"components: re-run pairs {100 * self.sigma_between:.3f}%, "
                f"split-half {100 * self.sigma_split_half:.3f}%, pooled "
                f"{100 * self.sigma_pooled:.3f}%, white floor {100 * self.sigma_floor:.3f}%",
                f"window means (s): {means}; spikes clipped per run: "
                f"{list(self.spikes_clipped)}",
            ]
        )


def _check_run(run: ArrayLike, name: str) -> np.ndarray:
    t = np.asarray(run, dtype=np.float64).reshape(-1)
    if t.size < MIN_STEPS_PER_RUN:
        raise SurrogateError(f"{name}: needs at least {MIN_STEPS_PER_RUN} steps, got {t.size}")
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise SurrogateError(f"{name}: step times must be finite and > 0 seconds")
    return t


def _winsorize(logt: np.ndarray, spike_z: float, spike_frac: float) -> tuple[np.ndarray, int, float]:
    """Clip rare isolated spikes; return (values, n_clipped, robust step SD)."""
    med = float(np.median(logt))
    sd = _MAD_TO_SD * float(np.median(np.abs(logt - med)))
    if sd <= 0.0:
        sd = float(np.std(logt, ddof=1)) if logt.size > 1 else 0.0
    if sd <= 0.0:
        return logt, 0, 0.0
    lo, hi = med - spike_z * sd, med + spike_z * sd
    outside = (logt < lo) | (logt > hi)
    n_out = int(outside.sum())
    if n_out == 0 or n_out > max(1, int(spike_frac * logt.size)):
        return logt, 0, sd
    return np.clip(logt, lo, hi), n_out, sd


def window_log_mean(step_times: ArrayLike, spike_z: float = 6.0, spike_frac: float = 0.01) -> float:
    """The robust window statistic of one run: mean log step time after spike clipping.

    Args:
        step_times: per-update step times in seconds, warm-up trimmed (>= 4, all > 0).
        spike_z, spike_frac: isolated-spike rule (see module docstring).

    Returns:
        c = mean of winsorized ln(step time).  ln(T0/T) for two runs is
        ``window_log_mean(ref) - window_log_mean(cand)``.

    Raises:
        SurrogateError: too few steps, or a non-finite / non-positive time.
    """
    logt = np.log(_check_run(step_times, "step_times"))
    clipped, _, _ = _winsorize(logt, spike_z, spike_frac)
    return float(clipped.mean())


def paired_log_speedup(
    reference_steps: ArrayLike,
    candidate_steps: ArrayLike,
    spike_z: float = 6.0,
    spike_frac: float = 0.01,
) -> float:
    """ln(T_ref / T_cand) from two runs' step times, with the calibration's window statistic.

    Positive means the candidate is faster.  Compare it with ``sigma_pair``
    (and ``big_knob_gate``) of a :class:`NoiseModel` calibrated with the same
    spike parameters.  Raises SurrogateError on invalid step times.
    """
    return window_log_mean(reference_steps, spike_z, spike_frac) - window_log_mean(
        candidate_steps, spike_z, spike_frac
    )


def calibrate(
    reference_runs: Sequence[np.ndarray],
    spike_z: float = 6.0,
    spike_frac: float = 0.01,
) -> NoiseModel:
    """Estimate paired log-step-time noise from repeated reference runs.

    Args:
        reference_runs: two or more 1-D arrays; each holds one reference run's
            per-update step times in seconds, warm-up already trimmed, at least
            4 steps each, all finite and > 0.  Runs may differ in length.
        spike_z: a step further than this many robust SDs from its run's
            median is a spike candidate.
        spike_frac: spikes are clipped only if at most max(1, spike_frac * n)
            steps of the run are spike candidates.

    Returns:
        A frozen :class:`NoiseModel` (sigma_pair, gate, margin, and the
        intermediate quantities).

    Raises:
        SurrogateError: fewer than two runs, or a run that fails the checks.
    """
    if isinstance(reference_runs, np.ndarray) and reference_runs.ndim == 1:
        raise SurrogateError("reference_runs: expected a sequence of runs, got one 1-D array")
    runs = [_check_run(r, f"reference_runs[{i}]") for i, r in enumerate(reference_runs)]
    k = len(runs)
    if k < 2:
        raise SurrogateError(f"reference_runs: needs at least 2 runs, got {k}")
    if not (spike_z > 0 and 0 <= spike_frac < 1):
        raise SurrogateError("spike_z must be > 0 and spike_frac in [0, 1)")

    centres, halves, clipped_counts, sds, white = [], [], [], [], []
    for t in runs:
        logt = np.log(t)
        w, n_clip, sd = _winsorize(logt, spike_z, spike_frac)
        half = w.size // 2
        centres.append(float(w.mean()))
        halves.append(float(w[:half].mean() - w[w.size - half :].mean()))
        clipped_counts.append(n_clip)
        sds.append(sd)
        white.append(sd * sd / w.size)

    c = np.asarray(centres)
    h = np.asarray(halves)
    v_between = 2.0 * float(np.var(c, ddof=1))
    v_split = float(np.mean(h * h) / 2.0)
    pooled = ((k - 1) * v_between + float(np.sum(h * h)) / 2.0) / (2 * k - 1)
    floor = 2.0 * float(np.mean(white))

    var_pair = max(pooled, v_between, floor)
    if var_pair == floor and floor > max(pooled, v_between):
        source = "floor"
    elif v_between > pooled:
        source = "between"
    else:
        source = "pooled"
    sigma = math.sqrt(var_pair)
    return NoiseModel(
        sigma_pair=sigma,
        big_knob_gate=max(MIN_BIG_KNOB_GATE, 2.0 * sigma),
        promotion_margin=math.expm1(2.0 * sigma),
        n_runs=k,
        n_steps=tuple(int(t.size) for t in runs),
        window_means_s=tuple(float(t.mean()) for t in runs),
        window_log_means=tuple(centres),
        split_half_diffs=tuple(halves),
        spikes_clipped=tuple(clipped_counts),
        step_sd_log=tuple(sds),
        sigma_between=math.sqrt(v_between),
        sigma_split_half=math.sqrt(v_split),
        sigma_pooled=math.sqrt(pooled),
        sigma_floor=math.sqrt(floor),
        source=source,
    )
