"""Hedged first slots (controller/search/batch.py): busy starts are hedged, q = 1 never is, replay is pure."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infrarsi.controller.search import batch
from infrarsi.controller.search.benchmark import run_benchmark
from infrarsi.controller.search.controller import SearchController
from infrarsi.controller.search.landscape import load_landscape
from infrarsi.controller.search.runner import run_search
from infrarsi.controller.search.strategies import make_strategy

from tests.search.conftest import make_noise, toy_evaluate, toy_space

ROOT = Path(__file__).resolve().parents[2]


def ctrl(seed: int = 0, ref_mem: float = 70.0) -> SearchController:
    return SearchController(toy_space(), make_noise(), 1.0, 80.0, seed=seed, reference_peak_mem_gib=ref_mem)


def test_one_at_a_time_never_hedges():
    c = ctrl()
    for _ in range(6):
        (cand,) = c.ask(1)
        assert c.proposed_by[cand] != "hedge"
        c.tell(cand, toy_evaluate(cand))


def test_a_busy_start_is_hedged_in_the_next_slot_by_a_one_knob_switch():
    c = ctrl(ref_mem=50.0)  # everything fits: the hedge is the crash/rejection one
    first, second = c.ask(2)
    assert first == c.starts[0] and c.proposed_by[second] == "hedge"
    changed = [k.name for k in c.space.knobs if first.value(k.name) != second.value(k.name)]
    assert len(changed) == 1
    # the riskiest setting (largest prior |effect|) of the start is the one switched
    risky = max((s for s in first.settings(c.space)), key=lambda s: abs(c.ledger.risk(s)))
    assert changed == [risky[0]]


def test_hedges_are_pure_in_the_history_and_pending_set():
    a, b = ctrl(seed=3), ctrl(seed=3)
    batch_a = a.ask(4)
    # a fresh controller asked slot by slot with the same pending set proposes the same candidates
    got = []
    for _ in range(4):
        got += b.ask(1, pending=got)
    assert got == batch_a
    assert sum(a.proposed_by[x] == "hedge" for x in batch_a) >= 1


def test_hedge_of_a_start_that_may_not_fit_fits():
    c = ctrl(ref_mem=70.0)
    start = c.starts[0]
    p_start = float(c.predict([start])[2][0])
    hedges = batch.hedges_of(c, start)
    assert hedges, "a start should have a hedge on the toy space"
    p = c.predict(hedges)[2]
    if p_start < batch.SAFE_FIT:
        assert p[0] >= batch.SAFE_FIT
    assert all(x >= 0.5 for x in p)


def test_dense_interactions_slots_8_keeps_its_slots_1_trials_to_90():
    """Before hedging the blind first batch was seven FP8 variants (all rejected): 9 trials at slots 8 vs 3."""
    land = load_landscape(ROOT / "bench/landscapes/dense_interactions.py")
    one = run_benchmark(land, ["infrarsi"], trials=16, repeats=3, slots=1)["strategies"]["infrarsi"]
    eight = run_benchmark(land, ["infrarsi"], trials=16, repeats=3, slots=8)["strategies"]["infrarsi"]
    assert one["median_trials_to_90"] is not None and eight["median_trials_to_90"] is not None
    assert eight["median_trials_to_90"] <= 1.5 * one["median_trials_to_90"]
    assert eight["median_wall_hours_to_90"] < one["median_wall_hours_to_90"]
    assert eight["false_promotions"] == 0


def _benchmark_controller(name: str, seed: int) -> SearchController:
    """The controller the benchmark builds for ``name`` (doctor included), before any trial."""
    from infrarsi.controller.search import benchmark
    got: list[SearchController] = []
    strat = benchmark.make_strategy

    def capture(*a, **k):
        s = strat(*a, **k)
        got.append(s)
        return s
    benchmark.make_strategy = capture
    try:
        benchmark.simulate_campaign(load_landscape(ROOT / f"bench/landscapes/{name}.py"), "infrarsi", seed, 0, slots=4)
    finally:
        benchmark.make_strategy = strat
    return got[0]


def test_a_start_with_two_failure_modes_gets_a_double_hedge_first():
    """heldout_vit_dataloader: start 1 risks an OOM (batch 128) and a crash (GPU decode with max-autotune);
    the memory-safe hedge alone keeps the crashing pair, the crash hedge alone keeps batch 128."""
    c = _benchmark_controller("heldout_vit_dataloader", 1)
    start = c.starts[0]
    assert float(c.predict([start])[2][0]) < batch.SAFE_FIT
    first, second = batch.hedges_of(c, start)
    moved = lambda h: {k.name for k in c.space.knobs if h.value(k.name) != start.value(k.name)}  # noqa: E731
    assert len(moved(first)) == 2 and moved(second) < moved(first)
    assert float(c.predict([first])[2][0]) >= batch.SAFE_FIT  # the double hedge fits
    assert float(c.predict([second])[2][0]) < batch.SAFE_FIT  # the crash hedge alone inherits the OOM risk


def _within_one_and_a_half_times_slots_1(name: str, trials: int, repeats: int, slots: int = 4) -> None:
    land = load_landscape(ROOT / f"bench/landscapes/{name}.py")
    one = run_benchmark(land, ["infrarsi"], trials=trials, repeats=repeats, slots=1)["strategies"]["infrarsi"]
    wide = run_benchmark(land, ["infrarsi"], trials=trials, repeats=repeats, slots=slots)["strategies"]["infrarsi"]
    assert one["median_trials_to_90"] is not None and wide["median_trials_to_90"] is not None
    assert wide["median_trials_to_90"] <= 1.5 * one["median_trials_to_90"]
    assert wide["false_promotions"] == 0


def test_vit_dataloader_within_one_and_a_half_times_slots_1():
    """Before the double hedge: 19 trials at slots 4 vs 12.5 at slots 1 (10 repeats, 32 trials)."""
    _within_one_and_a_half_times_slots_1("heldout_vit_dataloader", trials=24, repeats=3)


def test_a_crash_hedge_may_switch_off_a_risky_setting_that_saves_a_little_memory():
    """heldout_longctx_packing: start 1 holds FP8 with packing (a crash); FP8 off costs 3 GiB, so that hedge fits a
    little less likely than the start (within FIT_SLACK) and is still a crash hedge, alone and on top of the
    memory-safe one (before FIT_SLACK no hedge switched FP8 and every hedge crashed)."""
    c = _benchmark_controller("heldout_longctx_packing", 0)
    start = c.starts[0]
    assert start.value("fp8") is True and start.value("seq_packing") is True
    hedges = batch.hedges_of(c, start)
    assert len(hedges) == 2 and all(h.value("fp8") is False for h in hedges)
    p_start = float(c.predict([start])[2][0])
    p = [float(x) for x in c.predict(hedges)[2]]
    assert p[0] >= batch.SAFE_FIT  # the double hedge (FP8 off on the memory-safe variant)
    assert min(p_start, batch.SAFE_FIT) - batch.FIT_SLACK <= p[1] < p_start  # FP8 off alone


def test_longctx_packing_within_one_and_a_half_times_slots_1():
    """Before FIT_SLACK: 7 trials at slots 4 vs 3 at slots 1 (10 repeats, 32 trials); after: 3."""
    _within_one_and_a_half_times_slots_1("heldout_longctx_packing", trials=32, repeats=10)


def test_stacked_move_needs_busy_trials():
    """The stacked move (every lever the model rates positive, in one trial) is made at slots 8 and never
    at slots 1, where nothing is busy."""
    land = load_landscape(ROOT / "bench/landscapes/transfer_h20_llama8b.py")
    ops = {}
    for slots in (1, 8):
        strat = make_strategy("infrarsi", land.space, make_noise(), 1.0, land.capacity_gib, seed=1, parallel=slots > 1)
        run_search(land.space, land.evaluator(np.random.default_rng(1)), 16, strategy=strat, slots=slots,
                   duration=lambda _c, o: o.gpu_hours)
        ops[slots] = set(strat.proposed_by.values())
    assert "stacked" in ops[8] and "stacked" not in ops[1]


def test_wide_slots_h200_within_one_and_a_half_times_slots_1():
    """GPT on the H200: 19 trials at slots 8 vs 9 at slots 1 (10 repeats, 32 trials) with the stacked move
    alone; with Thompson draws in the wide slots 11.5 (30 repeats: 18 -> 13)."""
    _within_one_and_a_half_times_slots_1("transfer_h200_gpt7b", trials=32, repeats=10, slots=8)


def test_the_probe_takes_slot_4_unless_start_1_has_a_double_hedge():
    """The fourth of four blind slots goes to the contrarian probe before hedge 2 of start 1: on the two-node
    GPT-13B every start and hedge crashes (the overlapped parameter gather needs the distributed optimizer, which
    only the probe adds).  Where hedge 1 is the double hedge (long-context packing: FP8 off with micro-batch 1),
    hedge 2 is its crash switch alone, the peak there, and keeps the slot."""
    c = _benchmark_controller("heldout_gpt13b_twonode_h100", 0)
    assert not batch.hedges_and_double(c, c.starts[0])[1]
    first = c.ask(4)
    assert [c.proposed_by[x] for x in first] == ["start", "hedge", "start", "contrarian"]
    assert first[3].value("use_distributed_optimizer") is True

    c = _benchmark_controller("heldout_longctx_packing", 0)
    hedges, double = batch.hedges_and_double(c, c.starts[0])
    assert double
    first = c.ask(4)
    assert [c.proposed_by[x] for x in first] == ["start", "hedge", "start", "hedge"] and first[3] == hedges[1]


def test_a_wave_sharing_untested_settings_gets_slots_without_them():
    """heldout_mamba_hybrid_a100, seed 0, eight blind slots: torch.compile crashes beside the fused CUDA scan,
    and every start, hedge and model pick holds both, so without the spread all eight blind trials fail and the
    first working trial is asked only after they are told.  With it, once four are busy and most share
    settings no run has passed with, a slot goes to the best configuration without them: it runs."""
    land = load_landscape(ROOT / "bench/landscapes/heldout_mamba_hybrid_a100.py")
    statuses = {}
    for spread in (0.5, None):
        c = _benchmark_controller("heldout_mamba_hybrid_a100", 0)
        c.tune["spread_wave"] = spread
        first = c.ask(8)
        evaluate = land.evaluator(np.random.default_rng(0))
        statuses[spread] = [(c.proposed_by[x], evaluate(x).status) for x in first]
        if spread is not None:
            shared = batch.shared_untested(c, set(first[:5]), spread)
            assert ("torch_compile", True) in shared
            spread_out = [x for x in first if c.proposed_by[x] == "unshared"]
            assert spread_out and all(not (x.settings(c.space) & set(shared)) for x in spread_out[:1])
    assert all(status != "ok" for _, status in statuses[None])
    assert any(by == "unshared" and status == "ok" for by, status in statuses[0.5])


def test_four_slots_or_fewer_never_spread():
    """The spread needs four busy trials: a wave of four keeps the starts, hedges and probe (session 30)."""
    c = _benchmark_controller("heldout_mamba_hybrid_a100", 0)
    assert batch.shared_untested(c, set(c.ask(3)), 0.5) == []
    assert "unshared" not in {c.proposed_by[x] for x in c.ask(1)}


def test_longctx_packing_slots_8_within_one_and_a_half_times_slots_1():
    """Before the spread: 6 trials at slots 8 vs 3 at slots 1 (100 seeds): the patch probes and model picks of the
    first wave held FP8 with packing, crashed and completed before the FP8-off hedges; after: 4."""
    _within_one_and_a_half_times_slots_1("heldout_longctx_packing", trials=16, repeats=5, slots=8)
