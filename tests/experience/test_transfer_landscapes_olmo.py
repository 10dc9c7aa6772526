"""The session-33 held-out OLMo 13B transfer pair (issues 13 and 15; A100 80 GB / H200) loads, renames every flag,
flips the large bucket's and TP's sign, and crashes and fits memory where its docstrings say."""

from __future__ import annotations

from tests.experience.transfer_pairs import LANDS, check_pair, status_of

A100 = LANDS / "transfer_a100_olmo13b.py"
H200 = LANDS / "transfer_h200_olmo13b.py"


def test_olmo_pair_loads_with_renamed_flags_sign_flips_and_its_crash() -> None:
    a, b, effect = check_pair(A100, H200, knobs=10, skus=("A100", "H200"), nodes=1, family="olmo")
    for mech, value in (("grad_bucket", "400mb"), ("tensor_parallel", "2")):
        assert effect(0, mech, value) * effect(1, mech, value) < 0, (mech, value)  # the sign flips
    for mech, value in (("zero_stage", "2"), ("comm_overlap", "on"), ("grad_bucket", "100mb"),
                        ("attention_kernel", "flash"), ("graph_compile", "on"), ("optimizer_fusion", "fused"),
                        ("activation_checkpointing", "selective"), ("activation_checkpointing", "off"),
                        ("micro_batch", "2"), ("micro_batch", "4")):
        assert effect(0, mech, value) > 0 and effect(1, mech, value) > 0, (mech, value)
    assert a.true_speedup(a.space.reference()) == b.true_speedup(b.space.reference()) == 1.0
    assert 1.4 < a.peak_speedup() < b.peak_speedup() < 1.8
    for land in (a, b):  # the software's crash, on both SKUs
        assert status_of(land, graph_compile="on", activation_checkpointing="selective") == "crash"
        assert status_of(land, graph_compile="on", activation_checkpointing="off") == "ok"
    # no checkpointing under ZeRO-2: micro-batch 1 fits the A100, micro-batch 2 only under ZeRO-3
    off = {"activation_checkpointing": "off", "attention_kernel": "flash"}
    assert status_of(a, zero_stage="2", **off) == "ok"
    assert status_of(a, zero_stage="2", micro_batch="2", **off) == "oom"
    assert status_of(a, micro_batch="2", **off) == "ok"
    # the H200 takes ZeRO-2 without checkpointing at micro-batch 4 with flash attention, not without it
    assert status_of(b, zero_stage="2", micro_batch="4", **off) == "ok"
    assert status_of(b, zero_stage="2", micro_batch="4", activation_checkpointing="off") == "oom"
