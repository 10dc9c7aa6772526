"""The session-13 held-out NeoX 20B transfer pair (issue 13; H20 / H100) loads, renames every flag, flips TP2's
sign and crashes where its docstrings say."""

from __future__ import annotations

from infrarsi.controller.experience.transfer import landscape_knobs
from tests.experience.transfer_pairs import LANDS, check_pair

N20 = LANDS / "transfer_h20_neox20b.py"
N100 = LANDS / "transfer_h100_neox20b.py"


def test_neox_pair_loads_with_renamed_flags_sign_flips_and_shared_crashes() -> None:
    a, b, effect = check_pair(N20, N100, knobs=11, skus=("H20", "H100"), nodes=4, family="neox")
    by_a, by_b = ({k.mechanism: k for k in landscape_knobs(land)} for land in (a, b))
    assert effect(0, "tensor_parallel", "2") > 0 > effect(1, "tensor_parallel", "2")  # the sign flip
    for mech, value in (("low_precision_gemm", "on"), ("zero_stage", "2"), ("comm_overlap", "on"),
                        ("grad_bucket", "500mb"), ("attention_kernel", "flash"), ("optimizer_fusion", "fused"),
                        ("micro_batch", "4")):
        assert effect(0, mech, value) > 0 and effect(1, mech, value) > 0, (mech, value)
    assert effect(0, "zero_stage", "3") < 0 and effect(1, "zero_stage", "3") < 0
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert 1.4 < b.peak_speedup() < a.peak_speedup() < 1.6

    def run(land, by, **canon: str) -> str:
        cfg = {k["name"]: k["reference"] for k in land.module.KNOBS}
        for mech, value in canon.items():
            cfg[by[mech].name] = by[mech].value_for(value)
        return land.module.evaluate(cfg, [], None)["status"]

    for land, by in ((a, by_a), (b, by_b)):  # the software's crashes, on both SKUs
        assert run(land, by, low_precision_gemm="on", zero_stage="3") == "crash"
        assert run(land, by, sequence_parallel="on") == "crash"
        assert run(land, by, sequence_parallel="on", tensor_parallel="2") == "ok"
    # micro-batch 4 without flash attention fits the H20's 96 GiB, not the H100's 80
    assert run(a, by_a, micro_batch="4") == "ok" and run(b, by_b, micro_batch="4") == "oom"
    assert run(b, by_b, micro_batch="4", attention_kernel="flash") == "ok"
