"""Refit-time benchmark for the surrogate models.

Usage: python bench/bench_surrogate.py [--json] [--repeats N]

For n trials in (50, 200, 1000) and d features in (50, 200) it builds a
synthetic trial history (0/1 indicator features, about 20% on per row;
memory peaks on an 80 GiB card with about 5-50% OOM or near-cap rows, the
"cens" column)
and times, as the median over repeats:

* time_fit:   BayesLinearTimeModel.fit on all n rows
* time_upd:   BayesLinearTimeModel.update with one new row (rank-one)
* mem_cold:   TobitMemoryModel.fit from scratch
* mem_warm:   TobitMemoryModel.fit after one new row, warm-started
* refit:      time_fit + mem_warm, what the search pays per completed trial
* pred_1k:    predict (time mean/var + memory mean/sd + p_feasible) for
              1,000 candidate rows, what the search pays per proposal round

Target (brief): refit at most 50 ms at 1,000 x 200 on the 2-core CI machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Callable

import numpy as np

from infrarsi.surrogate import BayesLinearTimeModel, TobitMemoryModel

CAPACITY_GIB = 80.0
SIZES = [(50, 50), (50, 200), (200, 50), (200, 200), (1000, 50), (1000, 200)]


def synthetic(n: int, d: int, seed: int) -> dict[str, np.ndarray]:
    """A synthetic history: features, log-speedups, memory observations and kinds."""
    rng = np.random.default_rng(seed)
    X = (rng.random((n + 1, d)) < 0.2).astype(float)
    beta_t = rng.normal(0.0, 0.03, d)
    y_t = X @ beta_t + rng.normal(0.0, 0.005, n + 1)
    beta_m = rng.normal(0.0, 12.0 / np.sqrt(0.2 * d), d)
    m = 62.0 + X @ beta_m + rng.normal(0.0, 0.02 * CAPACITY_GIB, n + 1)
    kind = np.where(
        m > CAPACITY_GIB, "oom", np.where(m > 0.9 * CAPACITY_GIB, "near_cap", "exact")
    )
    y_m = np.where(m > CAPACITY_GIB, CAPACITY_GIB + 0.5 * (m - CAPACITY_GIB), m)
    return {"X": X, "y_t": y_t, "y_m": y_m, "kind": kind}


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of fn() in milliseconds."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(1000.0 * (time.perf_counter() - t0))
    return statistics.median(out)


def bench_one(n: int, d: int, repeats: int) -> dict[str, float]:
    """Time every operation for one (n, d); returns milliseconds plus censoring counts."""
    data = synthetic(n, d, seed=n * 1000 + d)
    X, y_t, y_m, kind = data["X"], data["y_t"], data["y_m"], data["kind"]
    prior_mu = np.zeros(d)

    def time_fit() -> None:
        BayesLinearTimeModel(prior_mu, 0.01, 0.005**2).fit(X[:n], y_t[:n])

    base = BayesLinearTimeModel(prior_mu, 0.01, 0.005**2).fit(X[:n], y_t[:n])

    def time_upd() -> None:
        base.update(X[n], y_t[n])

    def mem_cold() -> None:
        TobitMemoryModel(CAPACITY_GIB).fit(X[:n], y_m[:n], kind[:n])

    warm = TobitMemoryModel(CAPACITY_GIB).fit(X[:n], y_m[:n], kind[:n])

    def mem_warm() -> None:
        warm.fit(X, y_m, kind)

    cand = (np.random.default_rng(n + d).random((1000, d)) < 0.2).astype(float)

    def pred_1k() -> None:
        base.predict(cand)
        warm.predict(cand)
        warm.p_feasible(cand)

    res = {
        "n": n,
        "d": d,
        "censored": int(np.sum(kind[:n] != "exact")),
        "time_fit_ms": timed(time_fit, repeats),
        "time_upd_ms": timed(time_upd, repeats),
        "mem_cold_ms": timed(mem_cold, repeats),
        "mem_warm_ms": timed(mem_warm, repeats),
        "pred_1k_ms": timed(pred_1k, repeats),
    }
    cold = TobitMemoryModel(CAPACITY_GIB).fit(X[:n], y_m[:n], kind[:n])
    res["mem_newton_iters"] = cold.n_iter_
    res["refit_ms"] = res["time_fit_ms"] + res["mem_warm_ms"]
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    rows = [bench_one(n, d, args.repeats) for n, d in SIZES]
    if args.json:
        print(json.dumps({"machine": platform.node(), "python": sys.version.split()[0],
                          "numpy": np.__version__, "rows": rows}, indent=2))
        return 0
    head = f"{'trials':>6} {'feat':>5} {'cens':>5} {'time fit':>9} {'time upd':>9} " \
           f"{'mem cold':>9} {'iters':>5} {'mem warm':>9} {'refit':>8} {'pred 1k':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['n']:>6} {r['d']:>5} {r['censored']:>5} {r['time_fit_ms']:>8.2f}m "
              f"{r['time_upd_ms']:>8.2f}m {r['mem_cold_ms']:>8.2f}m {r['mem_newton_iters']:>5} "
              f"{r['mem_warm_ms']:>8.2f}m {r['refit_ms']:>7.2f}m {r['pred_1k_ms']:>7.2f}m")
    print("(m = milliseconds, median of", args.repeats, "repeats; refit = time fit + mem warm)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
