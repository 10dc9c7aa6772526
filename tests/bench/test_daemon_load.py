"""The load benchmark, small: the real daemon cycle on PostgreSQL keeps to one squeue and at most one sacct per
cycle for all live jobs of every campaign (a call budget, not timings)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres


def test_slurm_call_budget_per_cycle(tmp_path: Path, pg_server: str) -> None:
    from bench.bench_daemon_load import run_load, summarize

    res = run_load(campaigns=5, trials=12, workdir=tmp_path / "load", running_steps=3, max_cycles=80)
    summary = summarize(res, running_steps=3)
    assert summary["peak_live"] == 5 * 12  # every campaign's search trials were live at once
    for n, c in enumerate(res.cycles):
        assert c.slurm.get("squeue", 0) <= 1, (n, c)
        assert c.slurm.get("sacct", 0) <= 1, (n, c)
        assert c.db_queries > 0
    assert sum(c.slurm.get("squeue", 0) for c in res.cycles) >= len(res.cycles) // 2  # it did poll
    assert sum(c.slurm.get("sacct", 0) for c in res.cycles) >= 1  # failed jobs went through accounting
    # 5 x (2 references + 12 search + 1 promotion pair): every trial was ingested, with real signed receipts
    assert res.trials_ingested == summary["sbatch_total"] >= 5 * 14
    assert res.outcomes.get("ok", 0) >= res.trials_ingested * 0.8, res.outcomes
    assert "rejected" not in res.outcomes, res.outcomes  # the stand-in's receipts pass the judge
    assert res.controller_cpu_s > 0
