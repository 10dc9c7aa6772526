"""The held-out Mixtral transfer pair (issue 13) loads, renames every flag and flips the stated signs."""

from __future__ import annotations

from pathlib import Path

from infrarsi.controller.experience.transfer import landscape_environment, landscape_knobs
from infrarsi.controller.search.landscape import load_landscape

LANDS = Path(__file__).resolve().parents[2] / "bench" / "landscapes"
M20 = LANDS / "transfer_h20_mixtral.py"
M100 = LANDS / "transfer_h100_mixtral.py"


def test_mixtral_pair_loads_with_renamed_flags_and_sign_flips() -> None:
    a, b = load_landscape(M20), load_landscape(M100)
    ka, kb = landscape_knobs(a), landscape_knobs(b)
    assert len(ka) == len(kb) == 13 and a.space.size() == b.space.size()
    assert {k.name for k in ka}.isdisjoint({k.name for k in kb})        # every flag renamed
    assert [k.mechanism for k in ka] == [k.mechanism for k in kb]          # the same mechanisms, in order
    assert [k.klass for k in ka] == [k.klass for k in kb]
    ea, eb = landscape_environment(a, ka), landscape_environment(b, kb)
    assert (ea.gpu_sku, eb.gpu_sku) == ("H20", "H100") and ea.nodes == eb.nodes == 4
    assert ea.reference_state == eb.reference_state and ea.model_family == eb.model_family == "mixtral"
    by_a = {k.mechanism: k for k in ka}
    by_b = {k.mechanism: k for k in kb}

    def effect(land, knobs, mech: str, canonical: str) -> float:
        k = knobs[mech]
        return land.module.SPEED[(k.name, k.value_for(canonical))]

    # sign flips: FP8 (hardware-bound kernel), TP2, EP8 and the interleaved pipeline (balance)
    for mech, value in (("low_precision_gemm", "on"), ("tensor_parallel", "2"), ("expert_parallel", "8"),
                        ("virtual_pipeline", "2")):
        assert effect(a, by_a, mech, value) * effect(b, by_b, mech, value) < 0, mech
    # same sign on both: EP4, the all-to-all dispatcher, comm overlap and the kernel levers
    for mech, value in (("expert_parallel", "4"), ("moe_dispatcher", "alltoall"), ("comm_overlap", "on"),
                        ("graph_compile", "on"), ("attention_kernel", "flash"), ("optimizer_fusion", "fused"),
                        ("micro_batch", "2"), ("micro_batch", "4")):
        assert effect(a, by_a, mech, value) > 0 and effect(b, by_b, mech, value) > 0, (mech, value)
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert b.capacity_gib < a.capacity_gib
    # FP8 with the grouped GEMM crashes on both
    for land, by in ((a, by_a), (b, by_b)):
        cfg = {k["name"]: k["reference"] for k in land.module.KNOBS}
        for mech in ("low_precision_gemm", "grouped_gemm"):
            cfg[by[mech].name] = by[mech].value_for("on")
        assert land.module.evaluate(cfg, [], None)["status"] == "crash"
