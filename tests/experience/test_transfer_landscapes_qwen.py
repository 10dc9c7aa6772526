"""The session-5 held-out Qwen transfer pair (issue 13; L40S / B200) loads, renames every flag and flips the
stated signs."""

from __future__ import annotations

from infrarsi.controller.experience.transfer import landscape_knobs
from tests.experience.transfer_pairs import LANDS, check_pair

Q40 = LANDS / "transfer_l40s_qwen7b.py"
Q200 = LANDS / "transfer_b200_qwen7b.py"


def test_qwen_pair_loads_with_renamed_flags_and_sign_flips() -> None:
    a, b, effect = check_pair(Q40, Q200, knobs=13, skus=("L40S", "B200"), nodes=2, family="qwen")
    by_a, by_b = ({k.mechanism: k for k in landscape_knobs(land)} for land in (a, b))
    assert by_a["zero_stage"].canonical_of("SHARD_GRAD_OP") == by_b["zero_stage"].canonical_of("never") == "2"
    assert by_a["grad_reduce_dtype"].canonical_of("bf16") == by_b["grad_reduce_dtype"].canonical_of("bfloat16")
    # sign flips: TP2 and the FSDP backward prefetch (balance)
    for mech, value in (("tensor_parallel", "2"), ("fsdp_prefetch", "on")):
        assert effect(0, mech, value) * effect(1, mech, value) < 0, mech
    # same sign on both: FP8, TP4, CP2 (both cost), the FSDP levers and the kernel levers
    for mech, value in (("low_precision_gemm", "on"), ("zero_stage", "2"), ("grad_reduce_dtype", "bf16"),
                        ("activation_checkpointing", "off"), ("graph_compile", "on"), ("attention_kernel", "flash"),
                        ("fused_cross_entropy", "on"), ("fused_rmsnorm", "on"), ("micro_batch", "2")):
        assert effect(0, mech, value) > 0 and effect(1, mech, value) > 0, (mech, value)
    for mech, value in (("tensor_parallel", "4"), ("context_parallel", "2")):
        assert effect(0, mech, value) < 0 and effect(1, mech, value) < 0, (mech, value)
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert b.capacity_gib > a.capacity_gib
    # recompute off runs out of memory on the L40S without the memory savers, fits on the B200
    for land, by, status in ((a, by_a, "oom"), (b, by_b, "ok")):
        cfg = {k["name"]: k["reference"] for k in land.module.KNOBS}
        cfg[by["activation_checkpointing"].name] = by["activation_checkpointing"].value_for("off")
        assert land.module.evaluate(cfg, [], None)["status"] == status
    # context parallelism with the flash kernel crashes on the L40S only
    for land, by, status in ((a, by_a, "crash"), (b, by_b, "ok")):
        cfg = {k["name"]: k["reference"] for k in land.module.KNOBS}
        cfg[by["context_parallel"].name] = 2
        cfg[by["attention_kernel"].name] = by["attention_kernel"].value_for("flash")
        assert land.module.evaluate(cfg, [], None)["status"] == status
