"""The session-16 held-out Gemma 9B transfer pair (issue 13; H200 / L40S) loads, renames every flag, flips comm
overlap and the large bucket's sign, and crashes and fits memory where its docstrings say."""

from __future__ import annotations

from tests.experience.transfer_pairs import LANDS, check_pair, status_of

H200 = LANDS / "transfer_h200_gemma9b.py"
L40S = LANDS / "transfer_l40s_gemma9b.py"


def test_gemma_pair_loads_with_renamed_flags_sign_flips_and_its_crash() -> None:
    a, b, effect = check_pair(H200, L40S, knobs=10, skus=("H200", "L40S"), nodes=1, family="gemma")
    for mech, value in (("comm_overlap", "on"), ("grad_bucket", "400mb")):
        assert effect(0, mech, value) * effect(1, mech, value) < 0, (mech, value)  # the sign flips
    for mech, value in (("low_precision_gemm", "on"), ("grad_bucket", "100mb"), ("attention_kernel", "flash"),
                        ("graph_compile", "on"), ("optimizer_fusion", "fused"), ("micro_batch", "2"),
                        ("micro_batch", "4"), ("activation_checkpointing", "off")):
        assert effect(0, mech, value) > 0 and effect(1, mech, value) > 0, (mech, value)
    for value in ("2", "4"):  # TP costs on both
        assert effect(0, "tensor_parallel", value) < 0 and effect(1, "tensor_parallel", value) < 0
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert 1.4 < b.peak_speedup() < a.peak_speedup() < 1.7
    for land in (a, b):  # the software's crash (FP8 needs compile), on both SKUs
        assert status_of(land, low_precision_gemm="on") == "crash"
        assert status_of(land, low_precision_gemm="on", graph_compile="on") == "ok"
    # no checkpointing fits the H200 at micro-batch 4 and TP1; the L40S only from TP2
    off = {"activation_checkpointing": "off", "attention_kernel": "flash"}
    assert status_of(a, micro_batch="4", **off) == "ok"
    assert status_of(b, **off) == "oom" and status_of(b, tensor_parallel="2", micro_batch="2", **off) == "ok"
