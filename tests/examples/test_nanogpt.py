"""The nanogpt example on the CPU: real torch, real exec wrapper (when present), real judge.

One module-scoped fixture copies ``examples/nanogpt`` out of the project into its own git
repo (as a user would), runs every trial the tests need (two at a time), and keeps the
receipts; each test then asserts one property.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from infrarsi.controller.contract import load_contract
from infrarsi.controller.patches.intake import apply_patches, check_patch, load_patch_dir
from infrarsi.controller.errors import PatchError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nanogpt"
HAVE_WRAPPER = importlib.util.find_spec("infrarsi.verifier.exec") is not None and importlib.util.find_spec("infrarsi.verifier.judge") is not None
UPDATES, WINDOW = 16, (5, 16)
REF = ["--micro-batch", "1"]
TUNED = ["--micro-batch", "64", "--activation-checkpointing", "0", "--attention", "sdpa", "--optimizer-impl", "foreach"]
FAITHFUL = ["cached_causal_mask.diff", "fused_qkv.diff", "no_item_sync.diff", "zero_grad_set_to_none.diff"]

#: name -> (knob flags, patches)
TRIALS: dict[str, tuple[list[str], list[str]]] = {
    "ref": (REF, []),
    "tuned": (TUNED, []),
    "stacked": (TUNED, FAITHFUL),
    "detach_residual.diff": (TUNED, ["detach_residual.diff"]),
    "skip_microsteps.diff": (["--micro-batch", "8"], ["skip_microsteps.diff"]),
    "fake_step_time.diff": (TUNED, ["fake_step_time.diff"]),
    "skip_after_first.diff": (["--micro-batch", "8"], ["skip_after_first.diff"]),
}


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd, check=True,
                   capture_output=True)


def _run(repo: Path, work: Path, name: str, flags: list[str], patches: list[str]) -> dict[str, Any]:
    """Run one trial in its own copy of ``repo``; return ``{"receipt": Receipt|None, "updates", "header"}``."""
    trial_dir = work / name / "tree"
    shutil.copytree(repo, trial_dir, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    diffs = [(p, (repo / "patches" / p).read_text()) for p in patches]
    apply_patches(trial_dir, diffs)
    cmd = [sys.executable, "train.py", "--size", "tiny", "--updates", str(UPDATES), *flags]
    env = {**os.environ, "NANOGPT_THREADS": "1"}
    out = work / name / "out"
    if HAVE_WRAPPER:
        from infrarsi.verifier import signing
        from infrarsi.verifier.receipt import load_receipt

        master = hashlib.sha256(b"nanogpt-test-master").digest()
        key_file = work / name / "key"
        signing.write_key_file(str(key_file), signing.derive_trial_key(master, name))
        manifest = work / name / "frozen.json"
        manifest.write_text(json.dumps({"data.py": hashlib.sha256((repo / "data.py").read_bytes()).hexdigest()}))
        proc = subprocess.run([sys.executable, "-m", "infrarsi.verifier.exec", "--out", str(out), "--trial-id", name,
                               "--key-file", str(key_file), "--frozen-manifest", str(manifest), "--quiet",
                               "--timeout", "300", "--", *cmd], cwd=trial_dir, env=env, capture_output=True,
                              text=True, timeout=400)
        assert proc.returncode == 0, f"{name}: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
        receipt = load_receipt(out / "receipt.json", master, name)
        return {"receipt": receipt, "updates": receipt.updates, "header": receipt.header}
    out.mkdir(parents=True)
    rx = out / "receipt.jsonl"
    proc = subprocess.run(cmd, cwd=trial_dir, env={**env, "INFRARSI_RECEIPT_PATH": str(rx)}, capture_output=True,
                          text=True, timeout=400)
    assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}"
    lines = [json.loads(line) for line in rx.read_text().splitlines()]
    return {"receipt": None, "updates": [x for x in lines if x["kind"] == "update"],
            "header": next(x for x in lines if x["kind"] == "header")}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example copied out of the project and committed as its own git repository."""
    dst = tmp_path_factory.mktemp("nanogpt") / "nanogpt"
    shutil.copytree(EXAMPLE, dst, ignore=shutil.ignore_patterns("__pycache__"))
    _git(dst, "init", "-q")
    _git(dst, "add", "-A")
    _git(dst, "commit", "-q", "-m", "nanogpt")
    return dst


@pytest.fixture(scope="module")
def runs(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    work = tmp_path_factory.mktemp("trials")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_run, repo, work, name, flags, patches) for name, (flags, patches) in TRIALS.items()}
        return {name: f.result() for name, f in futures.items()}


def _losses(run: dict[str, Any]) -> list[float]:
    return [float(u["loss"]) for u in run["updates"]]


def _window_mean(values: list[float]) -> float:
    s, e = WINDOW
    part = values[s - 1:e]
    return sum(part) / len(part)


def _verdict(run: dict[str, Any], ref: dict[str, Any]) -> Any:
    from infrarsi.verifier.judge import JudgeSpec, judge

    spec = JudgeSpec(updates=UPDATES, window=WINDOW, tokens_per_update=4096, seq_len=64, tau=0.03,
                     precision_menu=("fp32", "amp-bf16"), static_invariants=("global_batch",), memory_cap_gib=8.0)
    return judge(run["receipt"], [ref["receipt"]], spec)


def _failed(verdict: Any) -> dict[str, str]:
    return {it.name: it.layer for it in verdict.items if it.rejects}


def test_contracts_are_valid() -> None:
    for name in ("infrarsi.yaml", "infrarsi.gpu.yaml"):
        contract = load_contract(EXAMPLE / name)
        assert contract.patches.dir == "patches"
        assert set(contract.editable_files) == {"train.py", "model.py"}
        assert "data.py" in contract.frozen_files


def test_loss_falls_and_header(runs: dict[str, dict[str, Any]]) -> None:
    losses = _losses(runs["ref"])
    assert len(losses) == UPDATES
    assert losses[-1] < 0.8 * losses[0], losses
    header = runs["ref"]["header"]
    assert header["tokens_per_update"] == 4096 and header["seq_len"] == 64
    assert header["extra"]["flops_per_token"] > 0 and header["extra"]["global_batch"] == 64
    assert [u["opt_step"] for u in runs["ref"]["updates"]] == list(range(1, UPDATES + 1))


def test_micro_batch_split_keeps_losses_and_data(runs: dict[str, dict[str, Any]]) -> None:
    for other in ("tuned", "skip_microsteps.diff"):
        assert runs[other]["header"]["model_digest"] == runs["ref"]["header"]["model_digest"]
    a, b = _losses(runs["ref"]), _losses(runs["tuned"])  # 1 x 64 vs 64 x 1 sequences
    assert all(abs(x - y) <= 1e-4 * abs(x) for x, y in zip(a, b)), (a, b)
    assert [u["batch_digest"] for u in runs["ref"]["updates"]] == [u["batch_digest"] for u in runs["tuned"]["updates"]]


def _window_time(run: dict[str, Any]) -> float:
    if run["receipt"] is not None:
        from infrarsi.verifier.judge import window_mean_step_time

        return window_mean_step_time(run["receipt"], WINDOW)
    return _window_mean([float(u["step_time_s"]) for u in run["updates"]])


def test_tuned_knobs_are_faster_on_cpu(runs: dict[str, dict[str, Any]]) -> None:
    assert _window_time(runs["tuned"]) < 0.5 * _window_time(runs["ref"])


def test_intake_classifies_every_shipped_patch(repo: Path) -> None:
    contract = load_contract(repo / "infrarsi.yaml")
    accepted, refused = {}, {}
    for name, text in load_patch_dir(repo / contract.patches.dir):
        try:
            accepted[name] = check_patch(repo, text, contract.editable_files, contract.frozen_files,
                                         contract.patches.max_changed_lines, name=name)
        except PatchError as exc:
            refused[name] = str(exc)
    assert set(refused) == {"touch_data.diff"}
    assert "frozen file 'data.py'" in refused["touch_data.diff"]
    assert set(accepted) == set(FAITHFUL) | {"detach_residual.diff", "skip_microsteps.diff", "fake_step_time.diff",
                                             "skip_after_first.diff"}


def test_faithful_patches_keep_losses(runs: dict[str, dict[str, Any]]) -> None:
    """All faithful patches stacked (in name order, as intake hands them out) on the tuned knobs."""
    patch = "stacked"
    ref, cand = _losses(runs["ref"]), _losses(runs[patch])
    assert abs(_window_mean(cand) - _window_mean(ref)) / _window_mean(ref) <= 0.03
    assert max(abs(a - b) / a for a, b in zip(ref, cand)) < 1e-3
    if HAVE_WRAPPER:
        verdict = _verdict(runs[patch], runs["ref"])
        assert verdict.accepted, verdict.summary()


def test_broken_gradient_patch_moves_the_loss(runs: dict[str, dict[str, Any]]) -> None:
    ref, cand = _losses(runs["ref"]), _losses(runs["detach_residual.diff"])
    assert abs(_window_mean(cand) - _window_mean(ref)) / _window_mean(ref) > 0.03
    if HAVE_WRAPPER:
        verdict = _verdict(runs["detach_residual.diff"], runs["ref"])
        assert not verdict.accepted
        assert _failed(verdict).get("loss_within_tolerance") == "L4", verdict.summary()


def test_skipping_micro_steps_fails_the_workload(runs: dict[str, dict[str, Any]]) -> None:
    assert {u["tokens"] for u in runs["skip_microsteps.diff"]["updates"]} == {2048}
    if HAVE_WRAPPER:
        verdict = _verdict(runs["skip_microsteps.diff"], runs["ref"])
        assert verdict.first_failed_layer == "L2", verdict.summary()
        assert {"same_workload", "same_data"} <= set(_failed(verdict))


@pytest.mark.skipif(not HAVE_WRAPPER, reason="needs the exec wrapper's clock")
def test_fake_step_time_fails_timing(runs: dict[str, dict[str, Any]]) -> None:
    verdict = _verdict(runs["fake_step_time.diff"], runs["ref"])
    assert verdict.first_failed_layer == "L5", verdict.summary()
    assert _failed(verdict) == {"timing_consistent": "L5"}
    honest = _verdict(runs["tuned"], runs["ref"])
    assert honest.accepted, honest.summary()


def _max_rel(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def test_skip_after_first_update_is_rejected_at_l4(runs: dict[str, dict[str, Any]]) -> None:
    """The red-team cheat: update 1 honest, then half the micro-batches, all reported consumed.

    It passes L1-L3 and, under the old L4 (gradient norm on update 1 only, flat 3% loss), would
    have passed L4 too; every per-update and end-of-run comparison now rejects it.
    """
    cheat, ref = runs["skip_after_first.diff"], runs["ref"]
    assert [u["tokens"] for u in cheat["updates"]] == [u["tokens"] for u in ref["updates"]]
    assert [u["batch_digest"] for u in cheat["updates"]] == [u["batch_digest"] for u in ref["updates"]]
    g, rg = [float(u["grad_norm"]) for u in cheat["updates"]], [float(u["grad_norm"]) for u in ref["updates"]]
    assert abs(g[0] - rg[0]) / rg[0] < 1e-4                       # the old check saw an honest first update
    assert 0.005 < _max_rel(_losses(cheat), _losses(ref)) < 0.03     # and every loss under the old flat 3%
    if HAVE_WRAPPER:
        verdict = _verdict(cheat, ref)
        failed = _failed(verdict)
        assert verdict.first_failed_layer == "L4", verdict.summary()
        assert {"loss_within_tolerance", "grad_norm_within_tol", "eval_matches", "params_match"} <= set(failed), failed
        assert not {"completes", "same_workload", "same_data", "optimizer_steps"} & set(failed), failed


@pytest.mark.skipif(not HAVE_WRAPPER, reason="needs the exec wrapper's receipts")
def test_honest_configurations_pass_every_numerical_check(runs: dict[str, dict[str, Any]]) -> None:
    for name in ("tuned", "stacked"):
        verdict = _verdict(runs[name], runs["ref"])
        l4 = {it.name: it for it in verdict.items if it.layer == "L4"}
        assert all(l4[k].status == "pass" for k in ("loss_within_tolerance", "grad_norm_within_tol", "eval_matches",
                                                    "params_match")), {k: v.reason for k, v in l4.items()}
