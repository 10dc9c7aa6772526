"""REPORT.md's proposers section: patch provenance and proposer cost next to GPU-hours; null-safe."""

from __future__ import annotations

from infrarsi.controller.report.markdown import render_report
from infrarsi.controller.report.proposers import proposers_section

RESULT = {
    "cost": {"total_gpu_hours": 0.0123, "total_cpu_hours": 0.5},
    "proposers": {
        "by_proposer": [
            {"proposer": "stub-llm", "kind": "llm", "model": "stub-1", "requests": 3, "ok": 2, "failed": 1,
             "tokens_in": 12000, "tokens_out": 900, "usd": 0.0312, "wall_s": 4.5},
            {"proposer": "scripted", "kind": "agent", "model": "python3", "requests": 1, "ok": 1, "failed": 0,
             "tokens_in": 0, "tokens_out": 0, "usd": None, "wall_s": 1.25},
        ],
        "totals": {"requests": 4, "tokens_in": 12000, "tokens_out": 900, "usd": 0.0312, "wall_s": 5.75},
        "patches": [
            {"name": "stub-llm-r0-abcdef12-1.diff", "proposer": "stub-llm", "kind": "llm",
             "prompt_digest": "abcdef1234567890", "claimed_gain": 0.3, "prior_mean": 0.1, "status": "promoted",
             "rationale": "fuse the qkv projection"},
            {"name": "stub-llm-r0-abcdef12-2.diff", "proposer": "stub-llm", "kind": "llm",
             "prompt_digest": "abcdef1234567890", "claimed_gain": 0.5, "prior_mean": 0.1,
             "status": "rejected by the verifier (L2)", "rationale": "skip | micro-steps"},
            {"name": "fused_qkv.diff", "proposer": "folder", "kind": "folder", "status": "verified"},
        ],
        "rounds": [{"proposer": "stub-llm", "kind": "patches", "ok": False, "reason": "answer is not JSON (x)"}],
        "priors": [{"knob": "dtype", "value": "bf16", "mean": 0.2, "spread": 0.1, "proposers": ["catalog"]}],
        "priors_dropped": ["catalog: nope=1: not a searched knob"],
    },
}


def test_section_names_each_proposer_its_cost_and_each_patch_source() -> None:
    md = proposers_section(RESULT)
    assert md.startswith("## Proposers")
    assert "4 requests, 12,000 tokens in, 900 tokens out, $0.0312, 5.8 s wall time" in md
    assert "0.0123 GPU-hours and 0.5000 CPU-hours of trials" in md
    assert "| stub-llm " in md and "| scripted " in md and "not priced" in md
    assert "stub-llm-r0-abcdef12-1.diff" in md and "promoted" in md and "abcdef123456" in md
    assert "rejected by the verifier (L2)" in md and "skip \\| micro-steps" in md
    assert "| fused_qkv.diff | folder" in md.replace("  ", " ") or "fused_qkv.diff" in md
    assert "answer is not JSON" in md
    assert "Knob priors from catalog: 1 knob values" in md and "1 named no searched value" in md


def test_folder_only_and_missing_data_render_without_error() -> None:
    assert "no language model or agent was asked" in proposers_section({})
    assert "no language model or agent was asked" in proposers_section({"proposers": None, "cost": None})
    md = render_report(RESULT)
    assert md.index("## Cost ledger") < md.index("## Proposers") < md.index("## Memory model")
