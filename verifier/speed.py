"""THE speedup statistic: one definition used by noise calibration, observations, promotion, L5 and the report.

Stdlib only (``math``, ``statistics``), so the verifier stays light and both the controller and the surrogate
import it.  docs/verifier.md, "Verified speedup", states the same definitions with the formulas.

1. **Window statistic of one run** (:func:`window_summary`, :func:`window_log_statistic`).  The run's per-update
   step times t_1..t_n inside the timing window (after warm-up; on the wrapper's clock) give

       T = mean_i(t'_i)          c = ln T

   where t' is t with *rare isolated stragglers* winsorized: a step whose ln t lies more than ``SPIKE_Z`` robust
   SDs (1.4826 * MAD of ln t) above the run's median is clipped to that bound, only when at most
   ``max(1, SPIKE_FRAC * n)`` steps are that far out, never the window's last step, and only when n >=
   ``MIN_CLIP_STEPS``.  Frequent excursions (periodic loader or collective stalls) are real cost and are kept.
   Why an *arithmetic* mean of seconds and not a mean of logs: T is time per update, which is what throughput
   is, and it cannot be lowered by redistributing time among steps (a job that emits its update lines in bursts,
   or queues work asynchronously, has uneven per-step times; a mean of logs -- a geometric mean -- rewards that,
   the arithmetic mean does not).  The winsorization is bounded (at most 1% of steps, clipped to
   median * e^(6 sd)) and what it removed is recorded (``clipped_s``).
2. **Paired log-speedup** of back-to-back pairs (reference run, candidate run): d_j = c_ref,j - c_cand,j;
   the speedup is exp(mean_j d_j) (:func:`paired_speedup`), with the interval mean ± 2 sigma_bound / sqrt(m).
3. **Noise and its bound** (:func:`pool_noise`).  sigma_pair is the SD of d between two runs of the *same*
   configuration.  Evidence: groups of repeated runs of one configuration (the doctor's reference runs,
   the reference re-runs of the promotion pairs, a candidate's search run and its re-runs) and split-half
   differences h_r of the reference runs.  With SS = sum over groups of sum (c - mean_group c)^2 and
   nu_b = sum over groups (m_g - 1):  v_between = 2 SS / nu_b, pooled = (2 SS + sum h^2 / 2) / (nu_b + k_h),
   sigma = sqrt(max(pooled, v_between, white floor)).  Degrees of freedom nu = nu_b when v_between set it,
   else nu_b + k_h.  Upper confidence bound at ``UCB_LEVEL`` (90%): sigma_ucb = sigma * sqrt(nu /
   chi2_{1-level}(nu)); the bound is max(sigma_ucb, ``MIN_SIGMA_PAIR``) (0.5%: GPU-class re-run noise,
   measured on an H200, docs/verifier.md).
4. **Promotion gate**: a candidate is promoted when mean d > ``GATE_K`` * sigma_bound, i.e. its speedup
   exceeds 1 + margin with margin = exp(2 sigma_bound) - 1 (:func:`clears`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

#: a step further than this many robust SDs (of ln t) above the median is a straggler candidate
SPIKE_Z = 6.0
#: stragglers are clipped only when at most max(1, SPIKE_FRAC * n) steps are that far out
SPIKE_FRAC = 0.01
#: no clipping in windows shorter than this (the MAD is unreliable)
MIN_CLIP_STEPS = 8
#: one-sided confidence level of the upper bound on sigma_pair
UCB_LEVEL = 0.90
#: documented minimum of the sigma_pair bound (0.5%; see docs/verifier.md "Verified speedup")
MIN_SIGMA_PAIR = 0.005
#: the gate: mean paired log-speedup must exceed GATE_K * sigma_bound
GATE_K = 2.0
_MAD_TO_SD = 1.482602218505602
#: lower 10% quantiles of chi-square with 1..30 degrees of freedom (scipy.stats.chi2.ppf(0.10, nu))
_CHI2_Q10 = (0.01579, 0.21072, 0.58437, 1.06362, 1.61031, 2.20413, 2.83311, 3.48954, 4.16816, 4.86518, 5.57778,
             6.3038, 7.0415, 7.78953, 8.54676, 9.31224, 10.08519, 10.86494, 11.65091, 12.44261, 13.2396, 14.04149,
             14.84796, 15.65868, 16.47341, 17.29188, 18.1139, 18.93924, 19.76774, 20.59923)


class SpeedError(ValueError):
    """Step times or evidence that the statistic cannot use; the message is one line naming what is wrong."""


@dataclass(frozen=True)
class WindowSummary:
    """One run's timing window under the statistic (see module docstring, item 1).

    Attributes:
        log_stat: c = ln T, the run's window statistic (log seconds).
        step_time_s: T = mean of the winsorized step times (seconds per update).
        plain_mean_s: mean of the raw step times (nothing clipped).
        n: steps in the window.
        clipped: stragglers winsorized.
        clipped_s: seconds removed by the winsorization (sum over clipped steps).
        sd_log: robust per-step SD of ln t (1.4826 * MAD; NaN when half the steps took no time).
        half_diff: ln(mean of the first half) - ln(mean of the second half), winsorized (0 when n < 2).
    """

    log_stat: float
    step_time_s: float
    plain_mean_s: float
    n: int
    clipped: int
    clipped_s: float
    sd_log: float
    half_diff: float


def _check(step_times: Iterable[float], name: str) -> list[float]:
    try:
        t = [float(x) for x in step_times]
    except (TypeError, ValueError):
        raise SpeedError(f"{name}: step times must be numbers") from None
    if not t:
        raise SpeedError(f"{name}: no step times in the window")
    if not all(math.isfinite(x) and x >= 0 for x in t):
        raise SpeedError(f"{name}: step times must be finite and >= 0 seconds")
    if not math.fsum(t) > 0:
        raise SpeedError(f"{name}: no time passed in the window")
    return t


def window_summary(step_times: Iterable[float], name: str = "step_times") -> WindowSummary:
    """The window statistic of one run with what it did.  Raises :class:`SpeedError` on an empty window, a step
    time that is not finite and >= 0, or a window in which no time passed (``name`` appears in the message)."""
    t = _check(step_times, name)
    n = len(t)
    logs = [math.log(x) if x > 0 else -math.inf for x in t]  # a zero step (lines in one burst) is never a straggler
    med = statistics.median(logs)
    sd = _MAD_TO_SD * statistics.median(abs(v - med) for v in logs) if math.isfinite(med) else math.nan
    if sd == 0.0 and n > 1 and all(math.isfinite(v) for v in logs):
        sd = statistics.stdev(logs)
    w = list(t)
    clipped, clipped_s = 0, 0.0
    if n >= MIN_CLIP_STEPS and math.isfinite(sd) and sd > 0.0:
        hi = med + SPIKE_Z * sd
        out = [i for i, v in enumerate(logs) if v > hi]
        if out and len(out) <= max(1, int(SPIKE_FRAC * n)) and n - 1 not in out:
            bound = math.exp(hi)
            for i in out:
                clipped_s += w[i] - bound
                w[i] = bound
            clipped = len(out)
    mean = math.fsum(w) / n
    half = n // 2
    first, second = math.fsum(w[:half]), math.fsum(w[n - half:])
    hd = math.log(first / second) if half and first > 0 and second > 0 else 0.0
    return WindowSummary(log_stat=math.log(mean), step_time_s=mean, plain_mean_s=math.fsum(t) / n, n=n,
                         clipped=clipped, clipped_s=clipped_s, sd_log=sd, half_diff=hd)


def window_log_statistic(step_times: Iterable[float]) -> float:
    """c = ln T of one run (see :func:`window_summary`); raises :class:`SpeedError` on bad step times."""
    return window_summary(step_times).log_stat


def window_step_time(step_times: Iterable[float]) -> float:
    """T of one run in seconds per update, or NaN when the window holds no usable step time (never raises:
    for judging receipts, where what cannot be established is ``unchecked``)."""
    try:
        return window_summary(step_times).step_time_s
    except SpeedError:
        return math.nan


# ------------------------------------------------------------------ noise bound
def chi2_lower_quantile(nu: int, level: float = UCB_LEVEL) -> float:
    """chi2_{1-level}(nu): tabulated for level 0.90 and nu <= 30, else the Wilson-Hilferty approximation
    (relative error < 3e-4 for nu > 30)."""
    if nu < 1:
        raise SpeedError(f"degrees of freedom must be >= 1, got {nu}")
    if not 0.5 <= level < 1.0:
        raise SpeedError(f"confidence level must be in [0.5, 1), got {level}")
    if abs(level - 0.90) < 1e-12 and nu <= len(_CHI2_Q10):
        return _CHI2_Q10[nu - 1]
    z = statistics.NormalDist().inv_cdf(1.0 - level)
    a = 2.0 / (9.0 * nu)
    return max(nu * (1.0 - a + z * math.sqrt(a)) ** 3, 1e-12)


def sigma_ucb(sigma: float, nu: int, level: float = UCB_LEVEL) -> float:
    """One-sided upper confidence bound of an SD estimated with ``nu`` degrees of freedom:
    sigma * sqrt(nu / chi2_{1-level}(nu))."""
    return sigma * math.sqrt(nu / chi2_lower_quantile(nu, level))


@dataclass(frozen=True)
class NoiseBound:
    """sigma_pair, its upper bound and the promotion margin derived from it, with the evidence behind them.

    Attributes:
        sigma_pair: point estimate (module docstring, item 3).
        dof: degrees of freedom of the estimate.
        level: confidence level of ``sigma_ucb``.
        sigma_ucb: upper confidence bound.
        sigma_min: the documented minimum.
        sigma_bound: max(sigma_ucb, sigma_min): what the gate uses.
        margin: exp(GATE_K * sigma_bound) - 1, the relative speedup to beat.
        set_by: "between", "pooled" or "floor" (which term set sigma_pair), or "minimum" when the minimum set the
            bound.
        n_runs: runs behind the estimate.
        sources: runs per source label, e.g. {"reference runs": 3, "reference re-runs": 3,
            "candidate repeats": 4}.
    """

    sigma_pair: float
    dof: int
    level: float
    sigma_ucb: float
    sigma_min: float
    sigma_bound: float
    margin: float
    set_by: str
    n_runs: int
    sources: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        d = asdict(self)
        d["sources"] = dict(self.sources)
        return d

    def describe(self) -> str:
        """One line for logs and reports."""
        src = ", ".join(f"{v} {k}" for k, v in self.sources.items() if v)
        return (f"sigma_pair {self.sigma_pair:.3%} ({self.dof} dof, set by {self.set_by}), {self.level:.0%} bound "
                f"{self.sigma_ucb:.3%}, floor {self.sigma_min:.2%} -> {self.sigma_bound:.3%}; margin "
                f"{self.margin:.2%}; {self.n_runs} runs ({src or 'none'})")


def pool_noise(groups: Sequence[tuple[str, Sequence[float]]], split_halves: Sequence[float] = (),
               white_var: float = 0.0, level: float = UCB_LEVEL, sigma_min: float = MIN_SIGMA_PAIR) -> NoiseBound:
    """Pool every repeated measurement into one sigma_pair estimate and bound it (module docstring, item 3).

    Args:
        groups: ``(source label, window statistics c of repeated runs of ONE configuration)``; groups with one
            run count as runs but add no degree of freedom.  Labels may repeat (their runs are summed in
            ``sources``).
        split_halves: h_r of runs whose within-run split counts (the doctor's reference runs), 1 dof each.
        white_var: the white-noise floor of the paired variance (0 for none).
        level, sigma_min: confidence level of the bound and its documented minimum.

    Raises:
        SpeedError: no degree of freedom at all, or a non-finite value.
    """
    ss, nu_b, n_runs = 0.0, 0, 0
    sources: dict[str, int] = {}
    for label, vals in groups:
        v = [float(x) for x in vals]
        if not all(math.isfinite(x) for x in v):
            raise SpeedError(f"noise evidence {label!r}: non-finite window statistic")
        n_runs += len(v)
        sources[label] = sources.get(label, 0) + len(v)
        if len(v) >= 2:
            m = math.fsum(v) / len(v)
            ss += math.fsum((x - m) ** 2 for x in v)
            nu_b += len(v) - 1
    h = [float(x) for x in split_halves]
    if not all(math.isfinite(x) for x in h) or not math.isfinite(white_var):
        raise SpeedError("noise evidence: non-finite split-half difference or floor")
    if nu_b + len(h) < 1:
        raise SpeedError("noise evidence: needs two runs of one configuration or a split-half difference")
    v_between = 2.0 * ss / nu_b if nu_b else 0.0
    pooled = (2.0 * ss + math.fsum(x * x for x in h) / 2.0) / (nu_b + len(h))
    var = max(pooled, v_between, white_var)
    if var == white_var and white_var > max(pooled, v_between):
        set_by, nu = "floor", nu_b + len(h)
    elif nu_b and v_between > pooled:
        set_by, nu = "between", nu_b
    else:
        set_by, nu = "pooled", nu_b + len(h)
    sigma = math.sqrt(var)
    ucb = sigma_ucb(sigma, nu, level)
    bound = max(ucb, sigma_min)
    if sigma_min > ucb:
        set_by = "minimum"
    return NoiseBound(sigma_pair=sigma, dof=nu, level=level, sigma_ucb=ucb, sigma_min=sigma_min,
                      sigma_bound=bound, margin=math.expm1(GATE_K * bound), set_by=set_by, n_runs=n_runs,
                      sources=sources)


def margin_of(sigma_bound: float) -> float:
    """The relative speedup a promotion must exceed: exp(GATE_K * sigma_bound) - 1."""
    return math.expm1(GATE_K * sigma_bound)


# ------------------------------------------------------------------ paired speedup and the gate
@dataclass(frozen=True)
class PairedSpeedup:
    """The paired log-speedup of back-to-back pairs (module docstring, item 2).

    Attributes:
        log_speedup: mean_j (c_ref,j - c_cand,j).
        speedup: exp(log_speedup).
        n_pairs: pairs used.
        log_diffs: the d_j.
    """

    log_speedup: float
    speedup: float
    n_pairs: int
    log_diffs: tuple[float, ...]

    def interval(self, sigma_bound: float) -> tuple[float, float]:
        """(low, high) speedup: exp(log_speedup -/+ GATE_K * sigma_bound / sqrt(n_pairs))."""
        half = GATE_K * sigma_bound / math.sqrt(self.n_pairs)
        return math.exp(self.log_speedup - half), math.exp(self.log_speedup + half)


def paired_speedup(pairs: Iterable[tuple[float, float]]) -> PairedSpeedup | None:
    """From pairs ``(T_ref, T_cand)`` (window step times in seconds, each = exp(c)); pairs where either is not
    finite and > 0 are skipped; None when no pair is usable."""
    d = [math.log(r) - math.log(c) for r, c in pairs
         if isinstance(r, (int, float)) and isinstance(c, (int, float))
         and math.isfinite(r) and math.isfinite(c) and r > 0 and c > 0]
    if not d:
        return None
    mean = math.fsum(d) / len(d)
    return PairedSpeedup(log_speedup=mean, speedup=math.exp(mean), n_pairs=len(d), log_diffs=tuple(d))


def clears(ps: PairedSpeedup, margin: float) -> bool:
    """THE promotion gate: mean paired log-speedup > ln(1 + margin) (i.e. speedup - 1 > margin)."""
    return ps.log_speedup > math.log1p(margin)
