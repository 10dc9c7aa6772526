"""The benchmark's simulated proposer: calibrated priors track the truth, miscalibrated ones do not."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from infrarsi.controller.search.benchmark import run_benchmark
from infrarsi.controller.search.landscape import load_landscape
from infrarsi.controller.search.simulated_proposer import PRIOR_MODES, simulated_priors

ROOT = Path(__file__).resolve().parents[2]
QUIET = ROOT / "bench" / "landscapes" / "quiet_node_levers.py"


def _truth_and_prior(mode: str) -> tuple[list[float], list[float]]:
    land = load_landscape(QUIET)
    space, _ = simulated_priors(land, mode, seed=3)
    ref = land.space.reference()
    truth, prior = [], []
    for k in space.knobs:
        for v in k.values:
            if v == k.reference:
                continue
            sp = land.true_speedup(ref.with_values({k.name: v}))
            truth.append(math.log(sp))
            prior.append(k.prior_of(v))
    return truth, prior


def _rank_corr(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_calibrated_priors_rank_like_the_truth_and_miscalibrated_do_not() -> None:
    truth, cal = _truth_and_prior("calibrated")
    _, mis = _truth_and_prior("miscalibrated")
    assert _rank_corr(truth, cal) > 0.7
    assert _rank_corr(truth, mis) < _rank_corr(truth, cal) - 0.3
    assert max(mis) > 1.5 * max(truth)  # inflated


def test_none_removes_every_prior_and_patch_claim() -> None:
    land = load_landscape(QUIET)
    space, claims = simulated_priors(land, "none")
    assert claims is None
    assert all(k.prior_mean is None and k.mem_prior_gib is None and k.prior_sd is None for k in space.knobs)
    assert space.reference() == land.space.reference()


def test_priors_are_deterministic_and_unknown_mode_is_refused() -> None:
    land = load_landscape(QUIET)
    a, ca = simulated_priors(land, "miscalibrated", seed=1)
    b, cb = simulated_priors(land, "miscalibrated", seed=1)
    assert [dict(k.prior_mean or {}) for k in a.knobs] == [dict(k.prior_mean or {}) for k in b.knobs] and ca == cb
    with pytest.raises(ValueError, match="priors mode 'bogus'"):
        simulated_priors(land, "bogus")


def test_benchmark_reports_one_row_per_prior_mode() -> None:
    land = load_landscape(QUIET)
    res = run_benchmark(land, ["infrarsi", "random"], trials=6, repeats=1, priors=PRIOR_MODES)
    assert list(res["strategies"]) == [f"infrarsi+priors:{m}" for m in PRIOR_MODES] + ["random"]


def test_cli_refuses_an_unknown_prior_mode() -> None:
    proc = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "bench", "search", "--landscape",
                           str(QUIET), "--trials", "3", "--repeats", "1", "--priors", "calibrated,wild", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "--priors: unknown wild" in proc.stderr
    ok = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "bench", "search", "--landscape",
                         str(QUIET), "--strategy", "infrarsi", "--trials", "3", "--repeats", "1", "--priors",
                         "calibrated", "--json"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert list(json.loads(ok.stdout)["strategies"]) == ["infrarsi+priors:calibrated"]
