"""The main job end to end on the CPU: the nanogpt example as its own git repo, init -> doctor -> run ->
report -> apply, with the verifier catching the broken and cheating patches and intake refusing the frozen one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.campaign.helpers import cli_env, git_repo, infrarsi

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nanogpt"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.slow
def test_nanogpt_campaign_end_to_end(tmp_path: Path) -> None:
    repo = git_repo(EXAMPLE, tmp_path / "nanogpt")
    base = _git(repo, "rev-parse", "HEAD").strip()
    env = cli_env(tmp_path / "home")
    init = infrarsi("init", env=env, cwd=repo)
    assert "scope locked" in init.stdout and "1 refused" in init.stdout, init.stdout
    doctor = infrarsi("doctor", env=env, cwd=repo)
    assert "sigma_pair" in doctor.stdout and "backward" in doctor.stdout, doctor.stdout
    run = infrarsi("run", env=env, cwd=repo, timeout=1500)
    assert "resuming campaign 1" in run.stderr
    report_path = Path(run.stdout.strip().splitlines()[-1].split("report: ")[1])
    result = json.loads((report_path.parent / "result.json").read_text())
    report = report_path.read_text()

    # a verified speedup >= 1.00x, or exactly 1.00x with the reason
    speedup = result["delivered_speedup"]
    assert speedup >= 1.0
    if result["promoted"] is None:
        assert speedup == 1.0 and result["reason"] and result["reason"] in report
    else:
        assert result["promotion"]["speed_reproduces"]["status"] == "pass"
        assert f"{speedup:.2f}x" in report
    assert (report_path.parent / "progress.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the frozen-file patch is refused before it runs; broken and cheating patches are rejected by the right layer
    assert "touch_data.diff" in result["refused_patches"]
    assert all("touch_data.diff" not in t["patches"] for t in result["trials"])
    # Each bad patch, where it is active, must be rejected no later than its layer: detach_residual breaks the
    # loss (L4), fake_step_time lies about the clock (L5), skip_microsteps skips work (L2/L3) -- but only when
    # there are micro-steps to skip (grad_accum > 1); with grad_accum == 1 it computes exactly the same thing.
    bad_layer = {"detach_residual.diff": "L4", "fake_step_time.diff": "L5", "skip_microsteps.diff": "L3"}
    tried_active: set[str] = set()
    for t in result["trials"]:
        active = [p for p in t["patches"] if p in bad_layer
                  and not (p == "skip_microsteps.diff" and t["config"]["grad_accum"] == 1)]
        if not active:
            continue
        assert t["outcome"] != "ok", t  # never accepted (a patch conflict or crash also stops it)
        if t["outcome"] == "rejected":
            tried_active |= set(active)
            assert t["first_failed_layer"] <= min(bad_layer[p] for p in active), t
    # the search decides which combinations it tries: the broken patch and at least one cheat must have been judged
    assert "detach_residual.diff" in tried_active, tried_active
    assert tried_active & {"fake_step_time.diff", "skip_microsteps.diff"}, tried_active
    faithful = {"fused_qkv.diff", "cached_causal_mask.diff", "no_item_sync.diff", "zero_grad_set_to_none.diff"}
    assert any(t["outcome"] == "ok" and t["patches"] and set(t["patches"]) <= faithful for t in result["trials"])
    rejected = [t for t in result["trials"] if t["outcome"] == "rejected"]
    assert len(rejected) >= 2 and sum(result["rejections_by_layer"].values()) == len(rejected)
    # a CPU campaign: its trials are booked as CPU-hours, never as GPU-hours; no MFU against a GPU peak (issue 16)
    assert result["cost"]["total_cpu_hours"] > 0 and result["cost"]["total_gpu_hours"] == 0
    assert result["cost"]["unit"] == "CPU" and result["mfu"] is None

    # apply writes a branch whose diff is the promoted diff plus the promoted launch configuration
    applied = infrarsi("apply", "--branch", "infrarsi/promoted", env=env, cwd=repo)
    assert "infrarsi/promoted" in applied.stdout
    changed = set(_git(repo, "diff", "--name-only", base, "infrarsi/promoted").split())
    patched = {line[6:] for line in (result["promoted"] or {}).get("diff", "").splitlines() if line.startswith("+++ b/")}
    assert changed == patched | {"infrarsi.promoted.yaml"}
    check = tmp_path / "check"
    _git(repo, "worktree", "add", "-q", "--detach", str(check), base)
    if patched:
        subprocess.run(["git", "-C", str(check), "apply", "-"], input=result["promoted"]["diff"], text=True, check=True)
    for f in patched:
        assert (check / f).read_text() == _git(repo, "show", f"infrarsi/promoted:{f}")
    # a second apply to the same branch is refused with one line
    again = infrarsi("apply", "--branch", "infrarsi/promoted", env=env, cwd=repo, check=False)
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    assert again.stderr.startswith("infrarsi: error: branch infrarsi/promoted already exists")
