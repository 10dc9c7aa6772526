"""Amdahl phase-headroom ceiling (paper section 4.1).

The doctor stage profiles the reference step into phases (forward, backward,
optimizer, data, collectives, ...).  A lever that only speeds up phases whose
combined share of the step is s can at most remove that share, so its
log-speedup ln(T0/T) is bounded by

    ceiling = -ln(1 - s + s / k)

where k is the largest speedup the lever could give those phases (k = inf:
the phases vanish entirely, ceiling = -ln(1 - s)).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np
from numpy.typing import ArrayLike

from infrarsi.surrogate.errors import SurrogateError


def phase_share(phase_times: Mapping[str, float], targets: Iterable[str]) -> float:
    """Fraction of the step spent in the target phases.

    Args:
        phase_times: profiled time (or share) per phase, all >= 0, sum > 0.
        targets: phase names the lever acts on; each must be a key.
    Returns: s in [0, 1].
    Raises: SurrogateError for an unknown phase or invalid times.
    """
    total = 0.0
    for name, t in phase_times.items():
        if not (math.isfinite(t) and t >= 0):
            raise SurrogateError(f"phase_times[{name!r}]: must be finite and >= 0, got {t!r}")
        total += t
    if total <= 0:
        raise SurrogateError("phase_times: total time must be > 0")
    chosen = set(targets)
    unknown = chosen - set(phase_times)
    if unknown:
        raise SurrogateError(f"targets: unknown phase(s) {sorted(unknown)}; known: {sorted(phase_times)}")
    # math.fsum is exactly rounded, so the result does not depend on the set's (hash-seeded) iteration order and
    # targeting every phase gives exactly 1.0
    return math.fsum(phase_times[p] for p in chosen) / math.fsum(phase_times.values())


def amdahl_ceiling(
    phase_times: Mapping[str, float],
    targets: Iterable[str],
    max_phase_speedup: float = math.inf,
) -> float:
    """Largest log-speedup a lever acting only on ``targets`` can deliver.

    Args:
        phase_times: profiled time per phase (see :func:`phase_share`).
        targets: phases the lever speeds up.
        max_phase_speedup: k > 1, the best speedup on those phases (default inf).
    Returns: -ln(1 - s + s/k) >= 0; +inf when s == 1 and k == inf.
    """
    if not max_phase_speedup > 1.0:
        raise SurrogateError(f"max_phase_speedup: must be > 1, got {max_phase_speedup!r}")
    s = phase_share(phase_times, targets)
    rest = 1.0 - s + (0.0 if math.isinf(max_phase_speedup) else s / max_phase_speedup)
    return math.inf if rest <= 0.0 else -math.log(rest)


def cap_log_speedup(prediction: ArrayLike, ceiling: ArrayLike) -> np.ndarray:
    """Elementwise min(prediction, ceiling); losses (negative values) are untouched.

    Args: prediction and ceiling broadcastable arrays of log-speedups.
    Returns: the capped float64 array.
    """
    pred = np.asarray(prediction, dtype=np.float64)
    cap = np.asarray(ceiling, dtype=np.float64)
    if np.any(np.isnan(cap)):
        raise SurrogateError("ceiling: contains NaN")
    return np.minimum(pred, cap)
