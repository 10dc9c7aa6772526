"""bench/trace.py: one campaign's trials in completion order, agreeing with the benchmark's score of it."""

from __future__ import annotations

from pathlib import Path

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
