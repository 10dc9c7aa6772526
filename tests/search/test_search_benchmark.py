"""The search benchmark: landscape loading, simulated outcomes, and the CLI in CI-sized form."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from infrarsi.controller.search.landscape import LOSS_TOLERANCE, LandscapeError, load_landscape
from infrarsi.controller.search.space import Candidate

ROOT = Path(__file__).resolve().parents[2]
LANDSCAPES = sorted((ROOT / "bench" / "landscapes").glob("*.py"))

TINY = '''
KNOBS = [{"name": "a", "values": [0, 1, 2], "reference": 0}, {"name": "b", "values": [False, True], "reference": False}]
PATCHES = ["p"]
CAPACITY_GIB = 10.0
GPUS = 2
TRIAL_UPDATES = 10
TRIAL_OVERHEAD_S = 36.0
def evaluate(config, patches, rng):
    if config["a"] == 2 and config["b"]:
        return {"status": "oom", "requested_gib": 12.0, "capacity_gib": 10.0}
    t = 1.0 / (1 + 0.1 * config["a"] + (0.2 if config["b"] else 0.0) + (0.3 if "p" in patches else 0.0))
    loss = 2.0 * (1.1 if ("p" in patches and config["a"] == 1) else 1.0)
    if rng is not None:
        t *= float(np.exp(rng.normal(0, 0.01)))
    return {"status": "ok", "step_time_s": t, "peak_mem_gib": 5.0, "loss": loss}
import numpy as np
'''


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_at_least_five_landscapes_ship():
    names = {p.stem for p in LANDSCAPES}
    assert len(names) >= 5
    for p in LANDSCAPES:
        land = load_landscape(p)
        assert land.space.knobs and land.capacity_gib > 0
        assert land.reference_time > 0


def test_tiny_landscape_truth_peak_rejection_and_gpu_hours(tmp_path):
    f = tmp_path / "tiny.py"
    f.write_text(TINY)
    land = load_landscape(f)
    # brute-forced peak skips numerically rejected (a=1 with p) and OOM (a=2 with b) points
    best = max((1 + 0.1 * a + 0.2 * b + 0.3 * p) for a in (0, 1, 2) for b in (0, 1) for p in (0, 1)
               if not (a == 2 and b) and not (p and a == 1))
    assert land.peak_speedup() == pytest.approx(best)
    bad = Candidate.from_dict({"a": 1, "b": False}, ["p"])
    o = land.to_outcome(land.raw(bad, None))
    assert o.status == "rejected" and o.rejected_layer == "L4" and LOSS_TOLERANCE == 0.03
    good = Candidate.from_dict({"a": 1, "b": False})
    o = land.to_outcome(land.raw(good, None))
    assert o.status == "ok"
    assert o.gpu_hours == pytest.approx((36.0 + 10 * o.step_time_s) / 3600 * 2)
    oom = land.to_outcome(land.raw(Candidate.from_dict({"a": 2, "b": True}), None))
    assert oom.status == "oom" and oom.requested_gib == 12.0 and oom.capacity_gib == 10.0
    assert land.true_speedup(bad) is None and land.true_speedup(None) == 1.0
    ev = land.evaluator(np.random.default_rng(0))
    assert ev(good).step_time_s != land.truth(good)["step_time_s"]  # noisy


def test_bad_landscape_is_one_line_error(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("CAPACITY_GIB = 1\n")
    with pytest.raises(LandscapeError, match="missing KNOBS"):
        load_landscape(f)
    r = cli("bench", "search", "--landscape", str(f), "--trials", "2", "--repeats", "1")
    assert r.returncode == 2 and "infrarsi: error:" in r.stderr and "bad.py" in r.stderr
    r = cli("bench", "search", "--landscape", str(LANDSCAPES[0]), "--strategy", "infrarsi,nope")
    assert r.returncode == 2 and "nope" in r.stderr


@pytest.mark.parametrize("path", LANDSCAPES, ids=lambda p: p.stem)
def test_bench_search_json_ci_sized(path):
    r = cli("bench", "search", "--landscape", str(path), "--strategy", "infrarsi,random,greedy,optuna-tpe",
            "--trials", "10", "--repeats", "2", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["landscape"] == path.stem and res["trials"] == 10 and res["repeats"] == 2
    assert res["peak_speedup"] >= 1.0
    assert set(res["strategies"]) == {"infrarsi", "random", "greedy", "optuna-tpe"}
    for name, s in res["strategies"].items():
        assert set(s) == {"median_trials_to_90", "median_gpu_hours_to_90", "median_wall_hours_to_90",
                          "median_final_speedup", "false_promotions", "ooms", "crashes"}
        assert 0 < s["median_final_speedup"] <= res["peak_speedup"] + 1e-9
        assert 0 <= s["false_promotions"] <= 2
        assert s["ooms"] >= 0 and s["crashes"] >= 0
        t = s["median_trials_to_90"]
        assert t is None or 1 <= t <= 10
        assert (t is None) == (s["median_gpu_hours_to_90"] is None) == (s["median_wall_hours_to_90"] is None)
    assert res["strategies"]["infrarsi"]["false_promotions"] == 0


def test_table_output():
    r = cli("bench", "search", "--landscape", str(LANDSCAPES[0]), "--strategy", "infrarsi,greedy",
            "--trials", "6", "--repeats", "1")
    assert r.returncode == 0, r.stderr
    assert "infrarsi" in r.stdout and "greedy" in r.stdout and "peak" in r.stdout
    assert not math.isnan(float(r.stdout.split("peak ")[1].split("x")[0]))
