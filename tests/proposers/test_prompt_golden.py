"""build_prompt is a pure function: golden files for fixed contexts, and its bound and contents for any size.

Regenerate the golden files after an intended change with ``INFRARSI_UPDATE_GOLDEN=1 python -m pytest
tests/proposers/test_prompt_golden.py`` and read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infrarsi.controller.proposers.base import PromptContext, RejectedPatch, TrialSummary, VerifiedPatch
from infrarsi.controller.proposers.prompt import build_prompt, line_scores, phase_weights, trim_file

GOLDEN = Path(__file__).parent / "golden"

CONTRACT = """name: toy-gpt
repo: .
launch:
  command: "python train.py {knobs}"
workload: {tokens_per_update: 4096, seq_len: 64}
editable_files: [model.py, train.py]
frozen_files: [data.py]
knobs:
  - {name: micro_batch, values: [1, 2, 4], reference: 1, batch_factor: true, apply: {flag: "--mb={value}"}}
  - {name: dtype, values: [fp32, bf16], reference: fp32, mechanism: mixed_precision, apply: {flag: "--dtype={value}"}}
patches: {dir: patches, max_changed_lines: 40}
"""


def _model_py() -> str:
    lines = ['"""A toy model."""', "import math", "import torch", ""]
    for i in range(12):
        lines += [f"def helper_{i}(x):", f"    # plain helper number {i}", f"    return x + {i}", ""]
    lines += ["class Attention(torch.nn.Module):", "    def forward(self, q, k, v):",
              "        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))",
              "        att = att.softmax(-1)", "        return att @ v", ""]
    for i in range(12):
        lines += [f"CONSTANT_{i} = {i}"]
    return "\n".join(lines) + "\n"


def _train_py() -> str:
    lines = ["import time", "import torch", "", "def main():"]
    for i in range(10):
        lines += [f"    setting_{i} = {i}"]
    lines += ["    for step in range(100):", "        optimizer.zero_grad(set_to_none=False)",
              "        for j in range(grad_accum):", "            batch = get_batch(j)",
              "            loss = model(batch) / grad_accum", "            loss.backward()",
              "        torch.nn.utils.clip_grad_norm_(params, 1.0)", "        optimizer.step()"]
    for i in range(10):
        lines += [f"    report_{i} = None"]
    return "\n".join(lines) + "\n"


def _trials() -> tuple[TrialSummary, ...]:
    out = []
    for i in range(12):
        ok = i % 5 != 3
        out.append(TrialSummary(key=f"t{i:02d}", config={"micro_batch": [1, 2, 4][i % 3], "dtype": "fp32"},
                                patches=("fused_qkv",) if i % 4 == 0 else (), step_time_s=0.2 - 0.01 * (i % 7),
                                speedup=1.0 + 0.05 * (i % 7) if ok else None, outcome="ok" if ok else "rejected",
                                verdict=None if ok else "L2 microsteps", reason=None if ok else "3 of 4 micro-steps",
                                peak_mem_gib=1.5 if ok else None))
    return tuple(out)


def _ctx(kind: str = "patches") -> PromptContext:
    return PromptContext(
        contract_yaml=CONTRACT, editable_files={"train.py": _train_py(), "model.py": _model_py()},
        phase_breakdown={"forward": 0.35, "backward": 0.4, "optimizer": 0.2, "data": 0.05}, amdahl_ceiling=2.86,
        trials=_trials(),
        rejected_patches=(RejectedPatch("skip_microsteps", "L2 microsteps", "ran 2 of 4 micro-steps per update",
                                        "0f" * 32),
                          RejectedPatch("touch_data", "intake", "touches frozen file 'data.py'", "1e" * 32)),
        kind=kind,  # type: ignore[arg-type]
        verified_patches=(VerifiedPatch("zero_grad_none", "--- a/train.py\n+++ b/train.py\n@@ -16 +16 @@\n"
                                        "-        optimizer.zero_grad(set_to_none=False)\n"
                                        "+        optimizer.zero_grad(set_to_none=True)\n", 1.02),)
        if kind == "complete" else ())


CASES = {
    "patches_28000": (lambda: _ctx("patches"), 28_000, "json"),
    "patches_5000": (lambda: _ctx("patches"), 5_000, "json"),
    "priors_4000": (lambda: _ctx("priors"), 4_000, "json"),
    "complete_edit_8000": (lambda: _ctx("complete"), 8_000, "edit"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    make, max_chars, answer = CASES[name]
    text = build_prompt(make(), max_chars, answer=answer)
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("INFRARSI_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs (INFRARSI_UPDATE_GOLDEN=1 regenerates it)"
    assert len(text) <= max_chars
    assert build_prompt(make(), max_chars, answer=answer) == text  # pure: same input, same prompt


@pytest.mark.parametrize("max_chars", [500, 2000, 3000, 5000, 9000, 15000, 28000, 100000])
def test_bound_and_what_always_survives(max_chars: int) -> None:
    text = build_prompt(_ctx(), max_chars)
    assert len(text) <= max_chars
    if max_chars >= 5000:
        assert "skip_microsteps: L2 microsteps: ran 2 of 4 micro-steps per update" in text  # every rejected patch
        assert "touch_data: intake" in text
        assert "backward 40.0%, forward 35.0%, optimizer 20.0%, data 5.0%" in text
        assert "Amdahl ceiling for what patches can reach: 2.86x" in text
        assert "### t11: ok" in text  # the most recent trial, in full
        assert "### t06: ok, speedup 1.300x" in text  # the fastest, in full
        assert "- t08: rejected L2 microsteps" in text  # the newest older one, on one line
    if max_chars >= 9000:
        assert "- t00: ok" in text and "older trials omitted" not in text  # every older one, on one line
        assert "att = att.softmax(-1)" in text  # forward code matters more than helpers when trimmed


def test_full_prompt_holds_whole_files_and_the_answer_format() -> None:
    text = build_prompt(_ctx(), 28_000)
    assert _model_py() in text and _train_py() in text
    assert '"mean_log_speedup"' in text and "Answer now with the JSON object only." in text
    edit = build_prompt(_ctx(), 28_000, answer="edit")
    assert "Edit the editable files in the current directory" in edit and '"mean_log_speedup"' not in edit


def test_trimming_keeps_what_the_phase_breakdown_says_matters() -> None:
    weights = phase_weights({"forward": 0.9, "data": 0.1, "mystery": 0.5, "comm": 0.0})
    assert weights == {"forward": 0.9, "data": 0.1}
    src = _model_py()
    scores = line_scores(src, weights)
    lines = src.split("\n")
    assert scores[lines.index("        att = att.softmax(-1)")] == pytest.approx(0.9)
    assert scores[lines.index("    return x + 3")] == 0.0
    trimmed = trim_file(src, weights, 600)
    assert len(trimmed) <= 600 and "att = att.softmax(-1)" in trimmed and "omitted" in trimmed
    assert "return x + 3" not in trimmed
