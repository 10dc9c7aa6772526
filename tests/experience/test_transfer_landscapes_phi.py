"""The session-16 held-out Phi 14B transfer pair (issue 13; A100 40 GB / H100 80 GB) loads, renames every flag,
flips TP and the large bucket's sign, crashes FP8 on the A100 only and fits memory where its docstrings say."""

from __future__ import annotations

from tests.experience.transfer_pairs import LANDS, check_pair, status_of

A100 = LANDS / "transfer_a100_phi14b.py"
H100 = LANDS / "transfer_h100_phi14b.py"


def test_phi_pair_loads_with_renamed_flags_sign_flips_and_its_crashes() -> None:
    a, b, effect = check_pair(A100, H100, knobs=10, skus=("A100-40GB", "H100"), nodes=2, family="phi")
    for mech, value in (("tensor_parallel", "2"), ("tensor_parallel", "4"), ("grad_bucket", "400mb")):
        assert effect(0, mech, value) * effect(1, mech, value) < 0, (mech, value)  # the sign flips
    for mech, value in (("comm_overlap", "on"), ("grad_bucket", "100mb"), ("attention_kernel", "flash"),
                        ("graph_compile", "on"), ("optimizer_fusion", "fused"), ("micro_batch", "2"),
                        ("micro_batch", "4"), ("activation_checkpointing", "off")):
        assert effect(0, mech, value) > 0 and effect(1, mech, value) > 0, (mech, value)
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert 1.4 < a.peak_speedup() < 1.6 and 1.4 < b.peak_speedup() < 1.6
    # FP8 is hardware: a crash on the A100, a gain on the H100
    assert status_of(a, low_precision_gemm="on") == "crash" and status_of(b, low_precision_gemm="on") == "ok"
    assert effect(1, "low_precision_gemm", "on") > 0
    for land in (a, b):  # the software's crash, on both SKUs
        assert status_of(land, graph_compile="on", comm_overlap="on") == "crash"
    # micro-batch 2 without checkpointing fits the H100's 80 GiB at TP1, not the A100's 40 (there from TP2)
    big = {"micro_batch": "2", "activation_checkpointing": "off", "attention_kernel": "flash"}
    assert status_of(a, **big) == "oom" and status_of(b, **big) == "ok"
    assert status_of(a, tensor_parallel="2", **big) == "ok"
    assert status_of(b, micro_batch="4", activation_checkpointing="off", attention_kernel="flash") == "oom"
