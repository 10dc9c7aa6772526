"""Batch and asynchronous search: slot filling, fantasies, replay, out-of-order completion, the benchmark's slots."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from infrarsi.controller.search.controller import SearchController
from infrarsi.controller.search.landscape import load_landscape
from infrarsi.controller.search.benchmark import run_benchmark
from infrarsi.controller.search.runner import run_search
from infrarsi.controller.search.space import Candidate, Outcome
from infrarsi.controller.search.strategies import make_strategy

from tests.search.conftest import make_noise, toy_evaluate, toy_space

ROOT = Path(__file__).resolve().parents[2]


def ctrl(seed: int = 0) -> SearchController:
    return SearchController(toy_space(), make_noise(), 1.0, 80.0, seed=seed, reference_peak_mem_gib=70.0)


class Recorder:
    """Wraps a strategy and records every ask's pending set and every tell."""

    def __init__(self, inner: SearchController):
        self.inner = inner
        self.asks: list[tuple[list[Candidate], list[Candidate], int]] = []  # (pending, answer, tells so far)
        self.tells: list[Candidate] = []

    def ask(self, q: int = 1, pending: Sequence[Candidate] = ()) -> list[Candidate]:
        got = self.inner.ask(q, pending)
        self.asks.append((list(pending), got, len(self.tells)))
        return got

    def tell(self, cand: Candidate, outcome: Outcome) -> None:
        self.tells.append(cand)
        self.inner.tell(cand, outcome)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def duration(cand: Candidate, o: Outcome) -> float:
    """Simulated wall hours: failures end early; compile and 8 workers make a trial slow."""
    if o.status != "ok":
        return 0.05
    return 1.0 + (2.5 if cand.value("compile") else 0.0) + (1.5 if cand.value("workers") == 8 else 0.0)


def test_async_slots_refill_at_once_and_finish_out_of_order():
    rec = Recorder(ctrl(seed=2))
    res = run_search(rec.inner.space, toy_evaluate, 14, strategy=rec, slots=3, duration=duration)
    assert len(res.trials) == 14 == len(res.wall_after) == len(res.best_after)
    asked = [a[1][0] for a in rec.asks if a[1]]
    assert len(asked) == 14 and len(set(asked)) == 14
    # the first three asks fill the empty slots back to back, then every ask sees two still running
    assert [len(p) for p, _, _ in rec.asks[:3]] == [0, 1, 2]
    later = [(len(p), told) for p, _, told in rec.asks[3:]]
    assert later and all(n == 2 for n, _ in later)
    # each later ask follows exactly one new tell (a slot is refilled at once, one at a time)
    assert [told for _, told in later] == list(range(1, len(later) + 1))
    assert rec.tells != asked  # out of order: a slow trial is overtaken by later fast ones
    assert res.wall_after == sorted(res.wall_after)
    # wall clock: 14 trials over 3 slots take less than running them one after another
    serial = sum(duration(c, o) for c, o in res.trials)
    assert res.wall_after[-1] < serial / 2
    assert not rec.inner.outstanding  # everything asked was told


def test_sync_rounds_last_as_long_as_their_slowest_trial():
    c = ctrl(seed=1)
    res = run_search(c.space, toy_evaluate, 8, q=4, strategy=c, duration=duration)
    first = [duration(cc, o) for cc, o in res.trials[:4]]
    assert res.wall_after[:4] == [max(first)] * 4
    assert res.wall_after[4] > res.wall_after[3]


def test_slots_1_is_exactly_the_sequential_search():
    a = run_search(toy_space(), toy_evaluate, 12, strategy=ctrl(seed=4))
    b = run_search(toy_space(), toy_evaluate, 12, strategy=ctrl(seed=4), slots=1)
    assert [c for c, _ in a.trials] == [c for c, _ in b.trials]
    assert a.promotion.candidate == b.promotion.candidate


def test_batch_equals_successive_single_asks_and_holds_the_starts():
    a, b = ctrl(seed=5), ctrl(seed=5)
    batch = a.ask(6)
    singles: list[Candidate] = []
    for _ in range(6):
        singles += b.ask(1, pending=singles)
    assert batch == singles
    assert set(a.starts) <= set(batch)  # the three starts spread over the first batch


def test_fantasies_shrink_uncertainty_around_pending_and_are_undone():
    c = ctrl(seed=0)
    c.tell(c.reference.with_values({"compile": True}), Outcome("ok", step_time_s=math.exp(-0.1), peak_mem_gib=70.0))
    x = c.reference.with_values({"algo": "tree"})
    before = c.predict([x])
    with c._fantasized({x}):
        inside = c.predict([x])
    after = c.predict([x])
    assert inside[1][0] < 0.8 * before[1][0]  # a provisional observation at its predicted mean
    assert inside[0][0] == np.float64(before[0][0]) or abs(inside[0][0] - before[0][0]) < 1e-9
    assert np.array_equal(after[0], before[0]) and np.array_equal(after[1], before[1])


def test_async_replay_after_restart_proposes_the_same_next_candidate():
    space = toy_space()
    a = ctrl(seed=7)
    running: list[Candidate] = []
    log: list[tuple[Candidate, Outcome]] = []
    finish_order = [1, 0, 2, 0, 1, 1, 0, 2, 0]  # index into running of the one that finishes next
    for k in finish_order:
        while len(running) < 3:
            running += a.ask(1, pending=running)
        done = running.pop(min(k, len(running) - 1))
        o = toy_evaluate(done, crash_pair=(("compile", True), ("algo", "tree")))
        a.tell(done, o)
        log.append((done, o))
    nxt = a.ask(1, pending=running)
    b = SearchController(space, make_noise(), 1.0, 80.0, seed=7, reference_peak_mem_gib=70.0)  # the restarted daemon
    b.asked_at.update({c: n for c, n in a.asked_at.items() if c not in nxt})  # its stored trials.asked_after
    for cand, o in log:
        b.tell(cand, o)
    assert b.ask(1, pending=running) == nxt
    assert nxt and nxt[0] not in running


def test_thompson_draws_fill_wide_slots_and_replay_after_restart():
    """With six or more trials busy a free slot may go to a Thompson draw; the draw is seeded by the ask,
    so a restarted controller told the same history proposes the same next candidate."""
    land = load_landscape(ROOT / "bench/landscapes/transfer_h200_gpt7b.py")
    evaluate = land.evaluator(np.random.default_rng(0))

    def fresh() -> SearchController:
        return make_strategy("infrarsi", land.space, make_noise(), 1.0, land.capacity_gib, seed=0, parallel=True)

    a = fresh()
    running: list[Candidate] = []
    log: list[tuple[Candidate, Outcome]] = []
    for k in [0, 3, 1, 5, 2, 0, 4, 1, 6, 0, 2, 7]:
        while len(running) < 8:
            running += a.ask(1, pending=running)
        done = running.pop(k)
        o = evaluate(done)
        a.tell(done, o)
        log.append((done, o))
    assert "thompson" in a.proposed_by.values()
    nxt = a.ask(1, pending=running)
    b = fresh()
    for cand, o in log:
        b.tell(cand, o)
    assert b.ask(1, pending=running) == nxt


def test_thompson_draws_are_optimistic_on_measured_levers_and_plain_elsewhere():
    """A lever a told trial ran with is never drawn below its posterior mean, so a wide-slot draw cannot drop a
    lever seen working by chance; one measured only in a crash, or never, is drawn either way (the batch
    stays hedged against conflicts nothing has shown yet)."""
    c = ctrl()
    ran = c.reference.with_values({"compile": True})
    crashed = c.reference.with_values({"algo": "tree", "recompute": "none"})
    c.tell(ran, toy_evaluate(ran))
    c.tell(crashed, Outcome("crash", reason="conflict", gpu_hours=0.01))
    fm = c.fmap
    mean, _ = c.view.coefficients()
    draws = np.array([c.view.coef_sample(np.random.default_rng(i)) for i in range(200)])
    below = (draws < mean - 1e-9).any(axis=0)
    assert not below[fm.index[("compile", True)]]
    assert below[fm.index[("algo", "tree")]] and below[fm.index[("recompute", "none")]]
    assert below[fm.index[("workers", 8)]]
    assert list(c.measured_features().nonzero()[0]) == [fm.index[("compile", True)]]


def test_slots_4_never_draws():
    """Thompson draws need six busy trials: a slots-4 search (three busy at each ask) never makes one."""
    land = load_landscape(ROOT / "bench/landscapes/transfer_h200_gpt7b.py")
    strat = make_strategy("infrarsi", land.space, make_noise(), 1.0, land.capacity_gib, seed=0, parallel=True)
    run_search(land.space, land.evaluator(np.random.default_rng(0)), 16, strategy=strat, slots=4,
               duration=lambda _c, o: o.gpu_hours)
    assert "thompson" not in strat.proposed_by.values()


def test_optuna_uses_constant_liar_only_when_parallel():
    space = toy_space()
    par = make_strategy("optuna-tpe", space, make_noise(), 1.0, 80.0, seed=0, parallel=True)
    seq = make_strategy("optuna-tpe", space, make_noise(), 1.0, 80.0, seed=0)
    assert par.study.sampler._constant_liar is True and seq.study.sampler._constant_liar is False
    # infrarsi accepts (and ignores) the flag: it takes pending trials through ask(pending=...)
    assert isinstance(make_strategy("infrarsi", space, make_noise(), 1.0, 80.0, parallel=True), SearchController)


def test_benchmark_wall_hours_fall_with_slots_and_cli_refuses_q_with_slots():
    land = load_landscape(ROOT / "bench" / "landscapes" / "moe_memory_cliff.py")
    walls = []
    for slots in (1, 4):
        res = run_benchmark(land, ["infrarsi"], trials=16, repeats=2, slots=slots)
        s = res["strategies"]["infrarsi"]
        assert res["slots"] == slots and res["q"] is None
        assert s["false_promotions"] == 0 and s["median_wall_hours_to_90"] is not None
        walls.append(s["median_wall_hours_to_90"])
    assert walls[1] < walls[0]
    r = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", "bench", "search", "--landscape",
                        str(land.path), "--q", "2", "--slots", "2"], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 2 and "--slots and --q" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    out = json.loads(subprocess.run(
        [sys.executable, "-m", "infrarsi.controller.cli.main", "bench", "search", "--landscape", str(land.path),
         "--strategy", "infrarsi,greedy", "--trials", "6", "--repeats", "1", "--slots", "3", "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=120).stdout)
    assert out["slots"] == 3 and set(out["strategies"]) == {"infrarsi", "greedy"}
    assert all("median_wall_hours_to_90" in s for s in out["strategies"].values())
