"""The search's memory model (controller/search/models.py MemoryModel): the additive default, and the optional
evidence-weighted mixture with a multiplicative form (tuning key ``memory_forms``), and the memory interactions
(``memory_pairs``, ``memory_activation_pairs``)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from infrarsi.controller.search.features import FeatureMap
from infrarsi.controller.search.landscape import Landscape, load_landscape
from infrarsi.controller.search.models import MemoryModel, memory_rows
from infrarsi.controller.search.space import Candidate

ROOT = Path(__file__).resolve().parents[2]


def _candidates(land: Landscape) -> list[Candidate]:
    knobs = land.space.knobs
    out = []
    for values in itertools.product(*(k.values for k in knobs)):
        d = {k.name: v for k, v in zip(knobs, values)}
        if land.space.legal(d):
            out.append(Candidate.from_dict(d, frozenset()))
    return out


def _fitted(land: Landscape, forms: str, n_told: int, seed: int = 0,
            activation_pairs: bool = False) -> tuple[MemoryModel, FeatureMap, list]:
    """A model told the reference, every one-knob switch and ``n_told`` random configurations (their true peaks
    or OOM requirements); also returns the configurations it was not told."""
    space = land.space
    fmap = FeatureMap(space)
    ref = space.reference()
    ref_mem = float(land.truth(ref)["peak_mem_gib"])
    mm = MemoryModel(space, fmap, land.capacity_gib, ref_mem, forms=forms, activation_pairs=activation_pairs)
    singles = [ref] + [Candidate.from_dict({**ref.as_dict(), k.name: v}, frozenset())
                       for k in space.knobs for v in k.values if v != k.reference]
    rest = [c for c in _candidates(land) if c not in set(singles)]
    rng = np.random.default_rng(seed)
    told_idx = set(rng.choice(len(rest), n_told, replace=False).tolist())
    told = singles + [rest[i] for i in sorted(told_idx)]
    history = [(c, land.to_outcome(land.truth(c))) for c in told]
    history = [(c, o) for c, o in history if o.status in ("ok", "oom")]
    idx, y, kind = memory_rows(history, land.capacity_gib)
    mm.refit(fmap.encode([history[i][0] for i in idx]), np.array(y), kind)
    unseen = [c for i, c in enumerate(rest) if i not in told_idx]
    return mm, fmap, unseen


def _truth_mem(land: Landscape, cands: list[Candidate]) -> np.ndarray:
    out = []
    for c in cands:
        r = land.truth(c)
        out.append(r["peak_mem_gib"] if r["status"] == "ok" else r.get("requested_gib", np.nan))
    return np.array(out, dtype=float)


def test_the_default_is_the_additive_form_alone():
    land = load_landscape(ROOT / "bench/landscapes/transfer_h100_starcoder15b.py")
    mm, fmap, unseen = _fitted(land, "additive", 4)
    assert mm.w_additive == 1.0 and mm.log_model is None
    X = fmap.encode(unseen[:50])
    mean, sd = mm.model.predict(mm.design(X))
    got_mean, got_sd = mm.predict(X)
    np.testing.assert_allclose(got_mean, mean, atol=1e-8)
    np.testing.assert_allclose(got_sd, sd, atol=1e-8)


def test_the_mixture_turns_multiplicative_where_activation_memory_scales():
    """StarCoder: activation memory = micro-batch x recompute share / (TP x CP) x flash factor.  A few combined
    trials give the log form the evidence, and its predictions of untried configurations beat the additive
    form's (which sums each setting's delta at the reference)."""
    land = load_landscape(ROOT / "bench/landscapes/transfer_h100_starcoder15b.py")
    mix, fmap, unseen = _fitted(land, "mixture", 6)
    add, _, _ = _fitted(land, "additive", 6)
    assert mix.w_additive < 0.05
    truth = _truth_mem(land, unseen)
    ok = np.isfinite(truth)
    X = fmap.encode([c for c, k in zip(unseen, ok) if k])
    err_mix = np.abs(mix.predict(X)[0] - truth[ok]).mean()
    err_add = np.abs(add.predict(X)[0] - truth[ok]).mean()
    assert err_mix < 0.75 * err_add
    fits = truth[ok] <= land.capacity_gib
    wrong_mix = ((mix.p_feasible(X) >= 0.5) != fits).mean()
    wrong_add = ((add.p_feasible(X) >= 0.5) != fits).mean()
    assert wrong_mix < wrong_add


def test_the_mixture_stays_additive_where_memory_adds():
    """GPT on the H200: every setting adds a fixed number of GiB; the additive form keeps the weight."""
    land = load_landscape(ROOT / "bench/landscapes/transfer_h200_gpt7b.py")
    mix, _, _ = _fitted(land, "mixture", 6)
    assert mix.w_additive > 0.99


def test_an_unknown_form_is_refused_by_name():
    land = load_landscape(ROOT / "bench/landscapes/transfer_h200_gpt7b.py")
    with pytest.raises(ValueError, match="memory_forms: must be one of"):
        MemoryModel(land.space, FeatureMap(land.space), land.capacity_gib, 60.0, forms="quadratic")


def _starcoder_controller(memory_pairs: bool):
    from infrarsi.controller.search.controller import SearchController
    from tests.search.conftest import make_noise

    land = load_landscape(ROOT / "bench/landscapes/transfer_h100_starcoder15b.py")
    ref = land.space.reference()
    c = SearchController(land.space, make_noise(), 1.0, land.capacity_gib, seed=0,
                         reference_peak_mem_gib=float(land.truth(ref)["peak_mem_gib"]), memory_pairs=memory_pairs,
                         memory_activation_pairs=False)  # the pairs a miss admits, on the plain additive model
    return land, c


def _with(land: Landscape, **values) -> Candidate:
    ref = land.space.reference().as_dict()
    return Candidate.from_dict({**ref, **{f"model.{k}": v for k, v in values.items()}}, frozenset())


def test_a_peak_far_from_the_additive_prediction_admits_a_memory_pair():
    """StarCoder on the H100: TP2 alone saves 17 GiB and no recompute alone spends 36, so the additive model puts
    TP2 + no recompute at 59 GiB; it uses 41 (TP divides the activations no recompute keeps).  That miss admits
    the (TP2, no recompute) interaction, and the next configuration holding both (plus the fused cross entropy,
    which moves no memory: 41 GiB) is predicted within a GiB or two; without the pair the fit spreads the miss
    over the singles and stays 5 GiB off."""
    errors = {}
    for pairs in (False, True):
        land, c = _starcoder_controller(pairs)
        tp2 = {"tensor_model_parallel_size": 2}
        none = {"activations_checkpoint_granularity": "none"}
        for cand in (land.space.reference(), _with(land, **tp2), _with(land, **none),
                     _with(land, use_flash_attention=True), _with(land, **tp2, **none)):
            c.tell(cand, land.to_outcome(land.truth(cand)))
        target = _with(land, **tp2, **none, cross_entropy_loss_fusion=True)
        truth = float(land.truth(target)["peak_mem_gib"])
        errors[pairs] = abs(float(c.mem.predict(c.fmap.encode([target]))[0][0]) - truth)
        assert bool(c.mem.pairs) is pairs
    assert errors[False] > 4.0 and errors[True] < 1.0, errors


def _prior_only(land: Landscape, activation_pairs: bool) -> tuple[MemoryModel, FeatureMap]:
    fmap = FeatureMap(land.space)
    ref_mem = float(land.truth(land.space.reference())["peak_mem_gib"])
    return MemoryModel(land.space, fmap, land.capacity_gib, ref_mem, activation_pairs=activation_pairs), fmap


def test_activation_pairs_join_settings_of_two_activation_mechanisms_only():
    """StarCoder's activation knobs (TP, SP, CP, recompute, flash, micro-batch) pair across knobs; FP8, the
    bucket and the overlap never enter a pair, and no pair joins two values of one knob."""
    from infrarsi.controller.experience.mechanisms import normalize
    from infrarsi.controller.search.models import ACTIVATION_MECHANISMS

    land = load_landscape(ROOT / "bench/landscapes/transfer_h100_starcoder15b.py")
    mm, fmap = _prior_only(land, True)
    assert len(mm.pairs) >= 20
    seen = set()
    for a, b in mm.pairs:
        (ka, _), (kb, _) = fmap.singles[a], fmap.singles[b]
        assert ka != kb
        for k in (ka, kb):
            knob = land.space.knob(k)
            assert normalize(knob.name, knob.mechanism, None)[0] in ACTIVATION_MECHANISMS
            seen.add(k)
    assert "model.fp8" not in seen and "model.overlap_grad_reduce" not in seen
    assert {"model.micro_batch_size", "model.activations_checkpoint_granularity",
            "model.tensor_model_parallel_size"} <= seen
    off, _ = _prior_only(land, False)
    assert off.pairs == []


def test_activation_pairs_predict_compounding_memory_before_any_trial():
    """Before any trial, the pairs' multiplicative priors (m_a x m_b / reference peak) bring the stated single
    deltas closer to StarCoder's peaks (micro-batch x recompute share / (TP x CP) x flash): the mean error over
    every legal configuration falls by at least a quarter."""
    land = load_landscape(ROOT / "bench/landscapes/transfer_h100_starcoder15b.py")
    cands = _candidates(land)
    truth = _truth_mem(land, cands)
    ok = np.isfinite(truth)
    errs = {}
    for on in (False, True):
        mm, fmap = _prior_only(land, on)
        errs[on] = np.abs(mm.predict(fmap.encode([c for c, k in zip(cands, ok) if k]))[0] - truth[ok]).mean()
    assert errs[True] < 0.75 * errs[False], errs


def test_activation_pairs_learn_their_way_to_zero_where_memory_adds():
    """GPT on a 40 GB MIG slice: flash and the micro-batch add fixed GiB.  The pair priors say flash shrinks a
    larger micro-batch; after the one-knob switches and a few combined trials the fit is back to the additive
    model's error on the untried configurations (within a GiB)."""
    land = load_landscape(ROOT / "bench/landscapes/heldout_gpt_mig40.py")
    base, fmap, unseen = _fitted(land, "additive", 6)
    paired, _, unseen_paired = _fitted(land, "additive", 6, activation_pairs=True)
    assert paired.pairs and unseen_paired == unseen
    truth = _truth_mem(land, unseen)
    ok = np.isfinite(truth)
    X = fmap.encode([c for c, k in zip(unseen, ok) if k])
    err_base = np.abs(base.predict(X)[0] - truth[ok]).mean()
    err_pairs = np.abs(paired.predict(X)[0] - truth[ok]).mean()
    assert err_pairs < err_base + 1.0, (err_pairs, err_base)
