"""bench/trace.py: one campaign's trials in completion order, agreeing with the benchmark's score of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.controller.search.benchmark import run_repeat
from infrarsi.controller.search.landscape import load_landscape

LAND = Path(__file__).resolve().parents[2] / "bench" / "landscapes" / "heldout_gpt_mig40.py"


def test_the_trace_marks_the_trial_the_benchmark_counts(capsys) -> None:
    from bench import trace

    land = load_landscape(LAND)
    for slots in (1, 4):
        rows = trace.trace(str(LAND), seed=3, slots=slots, trials=20)
        score = run_repeat(land, "infrarsi", 3, 20, land.peak_speedup(), 1, slots if slots > 1 else None)
        assert [r["n"] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) == 20
        reached = [r["n"] for r in rows if r["reached"]]
        assert reached == ([score.trials_to_90] if score.trials_to_90 is not None else [])
        assert sorted(r["sub"] for r in rows) == list(range(1, 21))  # every trial's submission index, once
        assert all(r["by"] != "-" for r in rows)
        assert [r["wall"] for r in rows] == sorted(r["wall"] for r in rows)  # completion order
    greedy = trace.trace(str(LAND), seed=3, slots=4, trials=8, strategy="greedy")  # a baseline: no operators
    assert sorted(r["sub"] for r in greedy) == list(range(1, 9)) and {r["by"] for r in greedy} == {"-"}
    assert trace.main([str(LAND), "--slots", "4", "--seed", "3", "--trials", "6"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and out[0].split()[0] == "1"


def test_a_transfer_trace_marks_the_trial_the_transfer_benchmark_counts(capsys) -> None:
    """``--source``: the target campaign of ``infrarsi bench transfer`` on one seed, the same trials it scores."""
    from bench import trace
    from infrarsi.controller.experience.transfer import run_transfer, source_experience

    here = LAND.parent
    src, tgt = here / "transfer_h200_gpt7b.py", here / "transfer_h20_gpt7b.py"
    res = run_transfer(load_landscape(src), load_landscape(tgt), ("cold", "bank-filtered"), trials=12, repeats=1,
                       seed0=2)
    got = source_experience(load_landscape(src), load_landscape(tgt), 2, 12, ("cold", "bank-filtered"))
    assert got["cold"] == ([], {}) and got["bank-filtered"][0]
    for mode in ("cold", "bank-filtered"):
        rows = trace.trace(str(tgt), seed=2, slots=1, trials=12, experience=got[mode][0])
        reached = [r["n"] for r in rows if r["reached"]]
        t90 = res["modes"][mode]["median_trials_to_90"]
        assert reached == ([t90] if t90 is not None else []), mode
    assert trace.main([str(tgt), "--source", str(src), "--seed", "2", "--trials", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and "records; coverage" in out[0] and "=covered" in out[0]  # the grades, then 5 trials
    # the source campaign runs --source-trials (30 by default), not the traced campaign's --trials
    assert trace.main([str(tgt), "--source", str(src), "--seed", "2", "--trials", "5", "--source-trials", "3"]) == 0
    short = capsys.readouterr().out.splitlines()
    assert len(short) == 6 and int(short[0].split()[0]) < int(out[0].split()[0])
    with pytest.raises(SystemExit):  # an unknown mode is refused by argparse, naming the modes
        trace.main([str(tgt), "--source", str(src), "--mode", "bank-some"])
    assert "choose from cold, bank-all, bank-filtered" in capsys.readouterr().err


def test_tune_traces_a_variant_and_restores_the_defaults(capsys) -> None:
    """``--tune KEY=JSON`` traces the controller under a ``DEFAULT_TUNING`` override (as ``sweep.py --tune``),
    only for that trace; an unknown key is refused with the known ones named."""
    from bench import trace
    from infrarsi.controller.search import controller

    before = dict(controller.DEFAULT_TUNING)
    land = str(LAND.parent / "transfer_h200_yi34b.py")
    args = [land, "--seed", "1", "--trials", "14"]
    assert trace.main(args) == 0
    plain = capsys.readouterr().out
    assert trace.main(args + ["--tune", "ordered_chain=0.7", "--tune", "ordered_chain_when=loss"]) == 0
    chained = capsys.readouterr().out
    assert chained != plain  # the chained time model proposes other trials on this seed
    assert controller.DEFAULT_TUNING == before
    assert trace.main(args) == 0 and capsys.readouterr().out == plain
    with pytest.raises(SystemExit):
        trace.main(args + ["--tune", "bogus=1"])
    assert "--tune bogus: not a tuning key" in capsys.readouterr().err
    assert controller.DEFAULT_TUNING == before
