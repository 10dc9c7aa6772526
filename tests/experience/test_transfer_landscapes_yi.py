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
