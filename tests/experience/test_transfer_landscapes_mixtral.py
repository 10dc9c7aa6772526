"""The held-out Mixtral transfer pair (issue 13) loads, renames every flag and flips the stated signs."""

from __future__ import annotations

from infrarsi.controller.experience.transfer import landscape_knobs
from tests.experience.transfer_pairs import LANDS, check_pair

M20 = LANDS / "transfer_h20_mixtral.py"
M100 = LANDS / "transfer_h100_mixtral.py"


def test_mixtral_pair_loads_with_renamed_flags_and_sign_flips() -> None:
    a, b, effect = check_pair(M20, M100, knobs=13, skus=("H20", "H100"), nodes=4, family="mixtral")
    by_a, by_b = ({k.mechanism: k for k in landscape_knobs(land)} for land in (a, b))

    # sign flips: FP8 (hardware-bound kernel), TP2, EP8 and the interleaved pipeline (balance)
    for mech, value in (("low_precision_gemm", "on"), ("tensor_parallel", "2"), ("expert_parallel", "8"),
                        ("virtual_pipeline", "2")):
        assert effect(0, mech, value) * effect(1, mech, value) < 0, mech
    # same sign on both: EP4, the all-to-all dispatcher, comm overlap and the kernel levers
    for mech, value in (("expert_parallel", "4"), ("moe_dispatcher", "alltoall"), ("comm_overlap", "on"),
                        ("graph_compile", "on"), ("attention_kernel", "flash"), ("optimizer_fusion", "fused"),
                        ("micro_batch", "2"), ("micro_batch", "4")):
        assert effect(0, mech, value) > 0 and effect(1, mech, value) > 0, (mech, value)
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert b.capacity_gib < a.capacity_gib
    # FP8 with the grouped GEMM crashes on both
    for land, by in ((a, by_a), (b, by_b)):
        cfg = {k["name"]: k["reference"] for k in land.module.KNOBS}
        for mech in ("low_precision_gemm", "grouped_gemm"):
            cfg[by[mech].name] = by[mech].value_for("on")
        assert land.module.evaluate(cfg, [], None)["status"] == "crash"
