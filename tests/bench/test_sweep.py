"""bench/sweep.py: per-seed sweeps equal the benchmark's own medians, compare and the criterion read them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infrarsi.controller.search.benchmark import run_benchmark
from infrarsi.controller.search.landscape import load_landscape

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def sweep():
    from bench import sweep as mod  # an importable module: the process pool pickles its functions by name

    return mod


def test_a_sweep_s_medians_are_the_benchmark_s(sweep, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    assert sweep.main(["run", "--landscapes", "heldout_gpt_mig40", "--slots", "1,4", "--repeats", "3",
                       "--jobs", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert sorted(doc["cells"]) == ["heldout_gpt_mig40/1/infrarsi", "heldout_gpt_mig40/4/infrarsi"]
    assert [s["seed"] for s in doc["cells"]["heldout_gpt_mig40/4/infrarsi"]] == [0, 1, 2]
    land = load_landscape(BENCH / "landscapes" / "heldout_gpt_mig40.py")
    for slots in (1, 4):
        ref = run_benchmark(land, ["infrarsi"], trials=32, repeats=3, slots=slots)["strategies"]["infrarsi"]
        got = sweep.medians(doc)[f"heldout_gpt_mig40/{slots}/infrarsi"]
        assert got["t90"] == ref["median_trials_to_90"] and got["final"] == ref["median_final_speedup"]
        assert got["w90"] == pytest.approx(ref["median_wall_hours_to_90"])


def test_compare_counts_seeds_and_the_criterion_names_a_miss(sweep, tmp_path: Path, capsys) -> None:
    def cell(t90s, w90s, final=2.0):
        return [{"seed": i, "t90": t, "w90": w, "final": final, "false": False}
                for i, (t, w) in enumerate(zip(t90s, w90s))]

    before = {"cells": {"x/1/infrarsi": cell([4, 4, 4], [1.0, 1.0, 1.0]),
                        "x/4/infrarsi": cell([5, 5, 5], [0.5, 0.5, 0.5])}}
    after = {"cells": {"x/1/infrarsi": cell([4, 4, 4], [1.0, 1.0, 1.0]),
                       "x/4/infrarsi": cell([3, 9, None], [0.3, 0.9, None])}}
    peers = {"medians": {"x/4/random": {"t90": 8, "w90": 0.4, "final": 2.5, "false": 0}}}
    paths = {}
    for name, doc in (("before", before), ("after", after), ("peers", peers)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(doc))
    sweep.main(["compare", str(paths["before"]), str(paths["after"])])
    out = capsys.readouterr().out
    assert "x/4/infrarsi" in out and "faster/slower 1/2" in out and "1 of 2 cells differ" in out
    # over every cell: 1 faster, 2 slower -> z = (1 - 2) / sqrt(3)
    assert "paired seeds over every cell: 1 faster, 2 slower (sign test z = -0.6;" in out
    sweep.main(["criterion", str(paths["after"]), "--peers", str(paths["peers"])])
    out = capsys.readouterr().out
    # 9 trials > 1.5 x 4, not below random's 8, final 2.0 below random's 2.5
    assert "MISS   x s4: trials 9 > 1.5x4; trials 9 !< random 8; final 2.0000 < random 2.5000" in out
    assert "0 hold, 0 fail only on wall hours, 1 miss" in out


def test_a_partial_sweep_takes_the_cells_it_does_not_run_from_a_base(sweep, tmp_path: Path, capsys) -> None:
    base = tmp_path / "base.json"
    kept = [{"seed": 0, "t90": 7, "w90": 0.5, "final": 1.5, "false": False}]
    stale = [{"seed": 0, "t90": 99, "w90": 9.0, "final": 1.0, "false": False}]
    base.write_text(json.dumps({"trials": 6, "cells": {"other/1/infrarsi": kept,
                                                       "heldout_gpt_mig40/4/infrarsi": stale}}))
    out = tmp_path / "s.json"
    assert sweep.main(["run", "--landscapes", "heldout_gpt_mig40", "--slots", "4", "--repeats", "1", "--trials",
                       "6", "--jobs", "1", "--fill-from", str(base), "--out", str(out)]) == 0
    cells = json.loads(out.read_text())["cells"]
    assert cells["other/1/infrarsi"] == kept  # not swept: copied
    assert cells["heldout_gpt_mig40/4/infrarsi"] != stale  # swept: this run's score, not the base's
    assert "copied 1 cells" in capsys.readouterr().out
    # a base run with another trial budget would mix incomparable cells: refused, nothing written
    assert sweep.main(["run", "--landscapes", "heldout_gpt_mig40", "--slots", "4", "--repeats", "1", "--trials",
                       "5", "--jobs", "1", "--fill-from", str(base), "--out", str(tmp_path / "x.json")]) == 2
    assert "was run with 6 trials, not 5" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_a_transfer_sweep_runs_only_the_directions_asked_and_refuses_an_unknown_one(sweep, tmp_path: Path,
                                                                                    capsys) -> None:
    base = tmp_path / "base.json"
    kept = [{"seed": 0, "t90": 3, "w90": None, "final": 1.4, "false": 0}]
    base.write_text(json.dumps({"trials": 6, "cells": {"transfer_h20_gpt7b->transfer_h200_gpt7b/cold": kept}}))
    out = tmp_path / "t.json"
    one = "transfer_h100_mixtral->transfer_h20_mixtral"
    assert sweep.main(["transfer", "--directions", one, "--repeats", "1", "--trials", "6", "--jobs", "1",
                       "--fill-from", str(base), "--out", str(out)]) == 0
    cells = json.loads(out.read_text())["cells"]
    assert sorted(cells) == sorted([f"{one}/cold", f"{one}/bank-all", f"{one}/bank-filtered",
                                    "transfer_h20_gpt7b->transfer_h200_gpt7b/cold"])
    assert cells["transfer_h20_gpt7b->transfer_h200_gpt7b/cold"] == kept
    capsys.readouterr()
    assert sweep.main(["transfer", "--directions", "transfer_h20_mixtral->transfer_h200_gpt7b", "--repeats", "1",
                       "--out", str(tmp_path / "x.json")]) == 2
    assert "unknown direction transfer_h20_mixtral->transfer_h200_gpt7b" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_the_bootstrap_settles_a_clear_cell_and_names_a_coin_flip(sweep, tmp_path: Path, capsys) -> None:
    def cell(t90s, wall=1.0):
        return [{"seed": i, "t90": t, "w90": wall, "final": 2.0, "false": False} for i, t in enumerate(t90s)]

    n = 30
    doc = {"cells": {
        # clear: slots 4 is level with slots 1 in every seed, so it holds in every resample
        "clear/1/infrarsi": cell([4] * n), "clear/4/infrarsi": cell([4] * n, 0.5),
        # coin flip: half the seeds need 4 trials, half 8; 8 > 1.5 x 4 misses, so the verdict follows the draw
        "flip/1/infrarsi": cell([4] * n), "flip/4/infrarsi": cell([4, 8] * (n // 2), 0.5),
    }}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    assert sweep.main(["criterion", str(path), "--peers", "", "--bootstrap", "400"]) == 0
    out = capsys.readouterr().out
    assert "1 hold in >= 95% of resamples, 0 in <= 5%, 1 unsettled:" in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("flip s4: holds in"))
    assert 25 <= int(line.split()[-1].rstrip("%")) <= 75
    assert "clear s4" not in out.split("unsettled:")[1]


def test_a_resample_keeps_cells_that_share_a_seed_paired(sweep) -> None:
    import random

    scores = [{"seed": i, "t90": t, "w90": None, "final": 1.0 + i, "false": False} for i, t in
              enumerate([1, 9, 3, 7, 5, 2, 8])]
    doc = {"cells": {"a/1/infrarsi": scores, "b/1/infrarsi": [dict(s) for s in scores]}}
    rng = random.Random(3)
    seen = set()
    for _ in range(50):
        m = sweep.resampled(doc, rng)
        assert m["a/1/infrarsi"] == m["b/1/infrarsi"]  # one draw of seeds for every cell
        seen.add(m["a/1/infrarsi"]["t90"])
    assert len(seen) > 2  # and the draws differ


def test_a_tuning_override_reaches_every_worker_and_an_unknown_key_is_refused(sweep, tmp_path: Path,
                                                                              capsys) -> None:
    def run(*tune: str) -> dict:
        out = tmp_path / "s.json"
        args = ["run", "--landscapes", "heldout_gpt_mig40", "--slots", "4", "--repeats", "2", "--trials", "12",
                "--jobs", "2", "--out", str(out)]
        for t in tune:
            args += ["--tune", t]
        assert sweep.main(args) == 0
        return json.loads(out.read_text())

    plain = run()
    # three random configurations per ask instead of the whole space: the workers' controllers must see it
    starved = run("pool_limit=0", "pool_sample=3")
    assert "tune" not in plain and starved["tune"] == {"pool_limit": 0, "pool_sample": 3}
    assert starved["cells"] != plain["cells"]
    capsys.readouterr()
    assert sweep.main(["run", "--landscapes", "heldout_gpt_mig40", "--tune", "trust_radious=1",
                       "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "--tune trust_radious: not a tuning key" in err and "trust_radius" in err
    assert not (tmp_path / "x.json").exists()
    assert sweep.main(["run", "--landscapes", "heldout_gpt_mig40", "--tune", "trust_radius",
                       "--out", str(tmp_path / "x.json")]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
