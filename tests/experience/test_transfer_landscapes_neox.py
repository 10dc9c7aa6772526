"""The session-13 held-out NeoX 20B transfer pair (issue 13; H20 / H100) loads, renames every flag, flips TP2's
sign and crashes where its docstrings say."""

from __future__ import annotations

from tests.experience.transfer_pairs import LANDS, check_pair, status_of

N20 = LANDS / "transfer_h20_neox20b.py"
N100 = LANDS / "transfer_h100_neox20b.py"


def test_neox_pair_loads_with_renamed_flags_sign_flips_and_shared_crashes() -> None:
    a, b, effect = check_pair(N20, N100, knobs=11, skus=("H20", "H100"), nodes=4, family="neox")
    assert effect(0, "tensor_parallel", "2") > 0 > effect(1, "tensor_parallel", "2")  # the sign flip
    for mech, value in (("low_precision_gemm", "on"), ("zero_stage", "2"), ("comm_overlap", "on"),
                        ("grad_bucket", "500mb"), ("attention_kernel", "flash"), ("optimizer_fusion", "fused"),
                        ("micro_batch", "4")):
        assert effect(0, mech, value) > 0 and effect(1, mech, value) > 0, (mech, value)
    assert effect(0, "zero_stage", "3") < 0 and effect(1, "zero_stage", "3") < 0
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert 1.4 < b.peak_speedup() < a.peak_speedup() < 1.6
    for land in (a, b):  # the software's crashes, on both SKUs
        assert status_of(land, low_precision_gemm="on", zero_stage="3") == "crash"
        assert status_of(land, sequence_parallel="on") == "crash"
        assert status_of(land, sequence_parallel="on", tensor_parallel="2") == "ok"
    # micro-batch 4 without flash attention fits the H20's 96 GiB, not the H100's 80
    assert status_of(a, micro_batch="4") == "ok" and status_of(b, micro_batch="4") == "oom"
    assert status_of(b, micro_batch="4", attention_kernel="flash") == "ok"
