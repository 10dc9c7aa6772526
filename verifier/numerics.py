"""Numerical comparisons of a trial with its reference, at tolerances calibrated per precision class.

Pure functions, standard library and :mod:`math` only (the verifier stays light).  The L4
invariants in :mod:`infrarsi.verifier.invariants` call into this module.

**Tolerance.**  For a compared quantity ``q`` (``loss``, ``grad_norm``, ``eval``, ``params``)::

    tol(q) = min(cap, max(K_SIGMA * sigma_q, FLOORS[class][q]))

* ``sigma_q``: the reference repeats' noise, the RMS over updates (and over every pair of
  repeats) of their relative disagreement, divided by sqrt(2) (the noise of one run).  With a
  single reference it is unknown and the floor alone applies.  Deterministic fp32 on the CPU
  gives 0.
* ``FLOORS[class][q]``: the disagreement of configurations known to be numerically
  equivalent (micro-batch splits, fused kernels, another attention or optimizer
  implementation), measured per precision class (docs/verifier.md, "Numerics", gives the
  measurements), with a margin.  ``class`` is the lower of the trial's and the reference's
  precision (:func:`comparison_class`); an unknown precision has no floor (the cap applies).
* ``cap``: the contract's flat tolerance, only ever an upper bound: ``tau`` for the loss and the
  parameters, ``tau_eval`` for the eval loss, ``GRAD_NORM_CAP_FACTOR * tau`` for the gradient
  norm (:func:`cap_for`).

**Curves** (loss, gradient norm) are compared update by update over every update, not a
window or the first update only: a job cannot know which update is the one that counts.
When the repeats themselves disagree beyond the cap (``K_SIGMA * sigma > cap``), no per-update
bound is meaningful and :func:`compare_curve` falls back to the window mean at
``max(cap, 3 sigma sqrt(2/k))``.

**Parameters**: the footer's ``param_norms`` (per-tensor L2 norms of the final parameters)
are compared as one vector: ``||n_trial - n_ref||_2 / ||n_ref||_2`` (:func:`norms_deviation`).
A per-tensor ratio would be dominated by tensors whose true gradient is zero (an attention
key bias): Adam turns their rounding noise into full-size steps, so their norms are noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

#: precision classes from the most to the least precise
CLASSES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
QUANTITIES: tuple[str, ...] = ("loss", "grad_norm", "eval", "params")
#: multiple of the repeats' per-update noise sigma that a trial may deviate by
K_SIGMA = 6.0
#: the gradient norm's cap is this multiple of tau: per update it is far noisier than the loss (bf16 autocast on
#: an H200, gpt-355m: 5.0% at the end of warm-up where the loss moved 0.011%)
GRAD_NORM_CAP_FACTOR = 4.0
#: relative floors per precision class and quantity (see the module docstring; measurements in docs/verifier.md)
FLOORS: dict[str, dict[str, float]] = {
    "fp32": {"loss": 2e-4, "grad_norm": 5e-3, "eval": 2e-4, "params": 2e-4},
    "tf32": {"loss": 1e-3, "grad_norm": 2e-2, "eval": 1e-3, "params": 1e-3},
    "fp16": {"loss": 5e-3, "grad_norm": 1e-1, "eval": 5e-3, "params": 1e-2},
    "bf16": {"loss": 5e-3, "grad_norm": 1e-1, "eval": 5e-3, "params": 1e-2},
}

def rel(a: float, b: float) -> float:
    """Relative deviation ``|a-b|/|b|`` (0 when equal, inf when ``b == 0 != a`` or either is not finite)."""
    if a == b:
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return math.inf
    return abs(a - b) / abs(b)


def precision_class(precision: object) -> str | None:
    """The class of a reported precision string (``fp32``, ``amp-bf16``, ``tf32``, ...), None when unknown.

    Matching is by substring, lowest precision first, so ``amp-bf16`` is ``bf16`` and
    ``fp32+tf32`` is ``tf32``; ``fp64``/``float32``/``fp32`` are ``fp32``.
    """
    if not isinstance(precision, str):
        return None
    p = precision.lower()
    for klass, needles in (("fp8", ("fp8", "float8", "e4m3", "e5m2")), ("bf16", ("bf16", "bfloat16")),
                           ("fp16", ("fp16", "float16", "half")), ("tf32", ("tf32",)),
                           ("fp32", ("fp32", "float32", "fp64", "float64"))):
        if any(n in p for n in needles):
            return klass
    return None


def comparison_class(trial_precision: object, ref_precision: object) -> str | None:
    """The class two runs are compared in: the lower precision of the two (None when either is unknown)."""
    a, b = precision_class(trial_precision), precision_class(ref_precision)
    if a is None or b is None:
        return None
    return CLASSES[max(CLASSES.index(a), CLASSES.index(b))]


@dataclass(frozen=True)
class Tolerance:
    """A calibrated relative tolerance and how it was reached (for the one-line reason)."""

    value: float
    quantity: str
    klass: str | None
    sigma: float | None
    floor: float | None
    cap: float

    @property
    def source(self) -> str:
        """Which term set the value: ``cap``, ``repeats`` (K_SIGMA * sigma) or ``floor``."""
        noise = K_SIGMA * self.sigma if self.sigma is not None and math.isfinite(self.sigma) else 0.0
        if self.floor is None or self.value >= self.cap:
            return "cap"
        return "repeats" if noise > self.floor else "floor"

    @property
    def noisy(self) -> bool:
        """True when the repeats alone disagree beyond the cap (no per-update bound is meaningful)."""
        return self.sigma is not None and math.isfinite(self.sigma) and K_SIGMA * self.sigma > self.cap

    def describe(self) -> str:
        """E.g. ``tol 0.10% (fp32 floor)`` or ``tol 3.00% (cap; precision unknown)``."""
        if self.source == "cap":
            why = "; precision class unknown" if self.floor is None else ""
            return f"tol {self.value:.2%} (cap{why})"
        if self.source == "repeats":
            return f"tol {self.value:.2%} ({K_SIGMA:g} x repeat sigma {self.sigma:.2e}, {self.klass})"
        return f"tol {self.value:.2%} ({self.klass} floor)"


def cap_for(quantity: str, tau: float, tau_eval: float) -> float:
    """The upper bound of a quantity's tolerance under the contract's ``tau`` / ``tau_eval``."""
    if quantity == "eval":
        return tau_eval
    if quantity == "grad_norm":
        return GRAD_NORM_CAP_FACTOR * tau
    return tau


def calibrate(quantity: str, klass: str | None, sigma: float | None, cap: float) -> Tolerance:
    """``min(cap, max(K_SIGMA * sigma, FLOORS[klass][quantity]))``; the cap alone when the class is unknown.

    Raises ``ValueError`` for an unknown quantity or a non-positive cap.
    """
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}")
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    floor = FLOORS.get(klass or "", {}).get(quantity)
    if floor is None:
        return Tolerance(cap, quantity, klass, sigma, None, cap)
    noise = K_SIGMA * sigma if sigma is not None and math.isfinite(sigma) else 0.0
    return Tolerance(min(cap, max(noise, floor)), quantity, klass, sigma, floor, cap)


def repeat_sigma(curves: Sequence[Sequence[float]]) -> tuple[float | None, float]:
    """(sigma, worst) of repeats of one curve: the per-run relative noise and the largest pairwise disagreement.

    sigma = sqrt(mean over updates and over every pair of repeats of d^2 / 2), d the relative
    difference of the pair at that update (relative to their mean).  None with fewer than two
    repeats (unknown); a non-finite value anywhere gives ``inf``.
    """
    curves = [list(c) for c in curves if len(c)]
    k = min((len(c) for c in curves), default=0)
    if len(curves) < 2 or k == 0:
        return None, 0.0
    sq: list[float] = []
    worst = 0.0
    for a in range(len(curves)):
        for b in range(a + 1, len(curves)):
            for i in range(k):
                x, y = curves[a][i], curves[b][i]
                mid = (x + y) / 2
                d = rel(x, mid) * 2 if mid != 0 else (0.0 if x == y else math.inf)
                sq.append(d * d)
                worst = max(worst, d)
    return math.sqrt(math.fsum(sq) / len(sq) / 2), worst


def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
    """Per-update mean over the repeats, truncated to the shortest."""
    k = min((len(c) for c in curves), default=0)
    return [math.fsum(c[i] for c in curves) / len(curves) for i in range(k)]


@dataclass(frozen=True)
class CurveResult:
    """Outcome of :func:`compare_curve`: ``ok`` and a one-line ``message``."""

    ok: bool
    message: str
    worst: float
    worst_update: int | None


def compare_curve(name: str, cand: Sequence[float], ref_curves: Sequence[Sequence[float]], tol: Tolerance,
                  window: tuple[int, int], per_update: bool = True) -> CurveResult:
    """Compare a trial's per-update series (update 1 first) with the mean of the reference repeats.

    ``per_update`` (the data order is proven equal): every update's relative deviation must be
    <= ``tol``; when the repeats are noisy beyond the cap (``tol.noisy``) or ``per_update`` is
    False, the mean over ``window`` (1-based, inclusive) is compared instead, at ``tol.cap``
    (widened to ``3 sigma sqrt(2/k)`` for noisy repeats).  A non-finite trial value fails.
    """
    ref = mean_curve(ref_curves)
    k = min(len(cand), len(ref))
    if k == 0:
        return CurveResult(False, f"no {name} values to compare", math.inf, None)
    bad = next((i for i in range(k) if not math.isfinite(cand[i])), None)
    if bad is not None:
        return CurveResult(False, f"non-finite {name} at update {bad + 1}", math.inf, bad + 1)
    if per_update and not tol.noisy:
        devs = [rel(cand[i], ref[i]) for i in range(k)]
        j = max(range(k), key=devs.__getitem__)
        ok = devs[j] <= tol.value
        return CurveResult(ok, f"largest per-update {name} deviation {devs[j]:.3%} (update {j + 1} of {k}) "
                               f"{'<=' if ok else '>'} {tol.describe()}", devs[j], j + 1)
    s, e = window
    cw, rw = list(cand[s - 1:min(e, k)]), ref[s - 1:min(e, k)]
    if not cw:
        return CurveResult(False, f"no {name} values inside the window {s}..{e}", math.inf, None)
    limit, how = tol.cap, "cap"
    if tol.noisy and tol.sigma is not None:
        limit, how = max(tol.cap, 3 * tol.sigma * math.sqrt(2 / len(cw))), "widened cap (noisy repeats)"
    dev = rel(math.fsum(cw) / len(cw), math.fsum(rw) / len(rw))
    ok = dev <= limit
    return CurveResult(ok, f"window-mean {name} deviation {dev:.3%} over {len(cw)} updates "
                           f"{'<=' if ok else '>'} {how} {limit:.2%}", dev, None)


def norms_deviation(trial: Mapping[str, float], ref: Mapping[str, float]) -> float:
    """``||t - r||_2 / ||r||_2`` over the per-tensor norms (inf when the tensor names differ or a value is not finite)."""
    if set(trial) != set(ref) or not ref:
        return math.inf
    num = math.fsum((float(trial[k]) - float(ref[k])) ** 2 for k in ref)
    den = math.fsum(float(v) ** 2 for v in ref.values())
    if not (math.isfinite(num) and math.isfinite(den)):
        return math.inf
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return math.sqrt(num / den)


def mean_norms(refs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-tensor mean of the repeats' norms (keys of the first repeat)."""
    return {k: math.fsum(float(r[k]) for r in refs) / len(refs) for k in refs[0]}


def norms_sigma(refs: Sequence[Mapping[str, float]]) -> float | None:
    """Per-run noise of :func:`norms_deviation` from every pair of repeats (RMS / sqrt 2); None with one."""
    if len(refs) < 2:
        return None
    d = [norms_deviation(refs[a], refs[b]) for a in range(len(refs)) for b in range(a + 1, len(refs))]
    return math.sqrt(math.fsum(x * x for x in d) / len(d) / 2)


def scalar_sigma(values: Sequence[float]) -> float | None:
    """Per-run relative noise of a scalar from its repeats (every pair; RMS / sqrt 2); None with one."""
    return repeat_sigma([[v] for v in values])[0]
