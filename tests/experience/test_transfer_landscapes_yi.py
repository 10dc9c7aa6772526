"""The session-15 held-out Yi 34B transfer pair (issue 13; H20 / H200) loads, renames every flag, flips TP and the
large bucket's sign and crashes where its docstrings say."""

from __future__ import annotations

from tests.experience.transfer_pairs import LANDS, check_pair, status_of

Y20 = LANDS / "transfer_h20_yi34b.py"
Y200 = LANDS / "transfer_h200_yi34b.py"


def test_yi_pair_loads_with_renamed_flags_sign_flips_and_shared_crashes() -> None:
    a, b, effect = check_pair(Y20, Y200, knobs=10, skus=("H20", "H200"), nodes=2, family="llama")
    for mech, value in (("tensor_parallel", "2"), ("tensor_parallel", "4"), ("grad_bucket", "400mb")):
        assert effect(0, mech, value) * effect(1, mech, value) < 0, (mech, value)  # the sign flips
    for mech, value in (("low_precision_gemm", "on"), ("comm_overlap", "on"), ("grad_bucket", "100mb"),
                        ("attention_kernel", "flash"), ("graph_compile", "on"), ("optimizer_fusion", "fused"),
                        ("micro_batch", "2"), ("activation_checkpointing", "off")):
        assert effect(0, mech, value) > 0 and effect(1, mech, value) > 0, (mech, value)
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert 1.5 < b.peak_speedup() and 1.5 < a.peak_speedup() < 1.8
    for land in (a, b):  # the software's crashes, on both SKUs
        assert status_of(land, graph_compile="on", tensor_parallel="4") == "crash"
        assert status_of(land, low_precision_gemm="on") == "crash"
        assert status_of(land, low_precision_gemm="on", attention_kernel="flash") == "ok"
    # micro-batch 2 without checkpointing fits the H200's 141 GiB at TP1, not the H20's 96
    big = {"micro_batch": "2", "activation_checkpointing": "off", "attention_kernel": "flash"}
    assert status_of(a, **big) == "oom" and status_of(b, **big) == "ok"
    assert status_of(a, tensor_parallel="2", **big) == "ok"


def test_the_experience_start_from_the_h200_fits_the_h20() -> None:
    """The H200 campaign's best runs micro-batch 2 without checkpointing (104 GiB with flash attention and
    compile: fine in 141, not in 96).  Its per-setting memory priors add up to a fit; the bundle's measured peak
    does not, so the H20's filtered experience start adds the nearest tensor-parallel saver (TP2) and runs.
    Before the bundle memory was carried, this start ran out of memory (seed 3) or took TP4, which crashes with
    compile (seed 2)."""
    from infrarsi.controller.experience.transfer import source_experience
    from infrarsi.controller.search.controller import SearchController
    from infrarsi.controller.search.landscape import load_landscape
    from tests.search.conftest import make_noise

    src, tgt = load_landscape(Y200), load_landscape(Y20)
    for seed in (2, 3):
        exp, _ = source_experience(src, tgt, seed, 30, ("bank-filtered",))["bank-filtered"]
        (start,) = [r for r in exp if "config" in r]
        assert start["mem_delta_gib"] > tgt.capacity_gib - 42.0  # the bundle, as measured, does not fit here
        c = SearchController(tgt.space, make_noise(0.01), 9.0, tgt.capacity_gib, seed=seed, experience=exp,
                             reference_peak_mem_gib=42.0)
        first = c.starts[0].as_dict()
        assert first["micro_batch_size"] == 2 and first["recompute_granularity"] == "none"
        assert first["tensor_model_parallel_size"] == 2
        assert tgt.module.evaluate(first, [], None)["status"] == "ok"
