"""A CPU smoke of a multi-rank contract is one documented flag (issue 16, item 9): ``infrarsi run --cpu-ranks N``
(``INFRARSI_CPU_RANKS=N``) runs a ``torchrun`` contract's trials as N gloo processes on the CPU and asks for no GPU,
without ``CUDA_VISIBLE_DEVICES=0,1``.  The real case runs the DDP-ready onboarding script (configurator globals)
as one trial of a 2-GPU torchrun contract, through the trial spec and the local executor, inside the sandbox."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from infrarsi.controller.campaign.engine import parse_contract_yaml
from infrarsi.controller.campaign.trialspec import build_spec, trial_dirs
from infrarsi.controller.errors import ExecutorError, InfrarsiError
from infrarsi.controller.executors.base import TrialSpec
from infrarsi.controller.executors.local import LocalExecutor
from infrarsi.controller.executors.render import launch_argv, render_sbatch
from infrarsi.controller.store.stage_records import Scope

SCRIPT_DIR = Path(__file__).resolve().parent / "scripts" / "globals"
MASTER = b"\x05" * 32
KEY = "feedfacefeedfacefeedfacefeedface"
SCOPE = Scope(commit="0" * 40)  # build_spec reads only the frozen manifest and the inputs

CONTRACT = """
name: ddp-smoke
repo: .
launch:
  command: "train.py --max_iters=1000 {knobs}"
  launcher: torchrun
  gpus_per_node: 2
  time_limit: "00:04:00"
  trial_args: ["--max_iters=6", "--eval_interval=0", "--log_interval=1000"]
  env: {OMP_NUM_THREADS: "1"}
workload:
  tokens_per_update: 1024
  seq_len: 16
trial:
  updates: 6
  window: [3, 6]
editable_files: [train.py]
frozen_files: [configurator.py]
precision_menu: [fp32]
memory_cap_gib: 4
knobs:
  - name: batch_size
    values: [2, 4, 8]
    reference: 8
    kind: ordered
    batch_factor: true
    mechanism: micro_batch
    apply: {flag: "--batch_size={value}"}
  - name: gradient_accumulation_steps
    values: [16, 8, 4, 2, 1]
    reference: 4
    kind: ordered
    batch_factor: true
    mechanism: grad_accum
    apply: {flag: "--gradient_accumulation_steps={value}"}
couplings:
  - product: [batch_size, gradient_accumulation_steps]
    equals: 32
    solve: gradient_accumulation_steps
budget:
  trials: 2
"""


def _spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranks: str | None) -> TrialSpec:
    if ranks is None:
        monkeypatch.delenv("INFRARSI_CPU_RANKS", raising=False)
    else:
        monkeypatch.setenv("INFRARSI_CPU_RANKS", ranks)
    contract = parse_contract_yaml(CONTRACT)
    src, out = trial_dirs(tmp_path, KEY)
    if not src.exists():
        shutil.copytree(SCRIPT_DIR, src, ignore=shutil.ignore_patterns("__pycache__"))
    return build_spec(contract, SCOPE, dict(contract.reference_config), KEY, src, out, MASTER, None)


def test_the_flag_turns_gpu_ranks_into_cpu_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _spec(tmp_path, monkeypatch, None)
    assert plain.cpu_ranks is None and plain.gpus_per_node == 2
    assert "--nproc-per-node=2" in launch_argv(plain, "python3") and "--gres=gpu:2" in render_sbatch(plain, "python3")
    smoke = _spec(tmp_path, monkeypatch, "2")
    assert smoke.cpu_ranks == 2 and smoke.gpus_per_node == 0  # no GPU asked for: the local executor needs none
    argv = launch_argv(smoke, "python3")
    assert argv[:3] == ["python3", "-m", "torch.distributed.run"] and "--nproc-per-node=2" in argv
    script = render_sbatch(smoke, "python3")
    assert "--gres" not in script and "--nproc-per-node=2" in script.replace("'", "")
    assert not any("CUDA_VISIBLE_DEVICES" in k for k, _ in smoke.env)


@pytest.mark.parametrize("bad", ["two", "0", "-1", "65"])
def test_a_bad_value_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    with pytest.raises(InfrarsiError, match="INFRARSI_CPU_RANKS: .* is not a number of ranks from 1 to 64"):
        _spec(tmp_path, monkeypatch, bad)


def test_cpu_ranks_need_the_torchrun_launcher(tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match="cpu_ranks: 2 needs the torchrun launcher"):
        TrialSpec(trial_id="t", workdir=tmp_path, outdir=tmp_path, argv=("train.py",), launcher="python", cpu_ranks=2)


def test_cli_documents_the_flag() -> None:
    from click.testing import CliRunner

    from infrarsi.controller.cli.main import cli

    out = CliRunner().invoke(cli, ["run", "--help"]).output
    assert "--cpu-ranks N" in out and "INFRARSI_CPU_RANKS" in out


def test_a_two_rank_torchrun_trial_runs_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFRARSI_CPU_RANKS", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ex = LocalExecutor(max_concurrent=1, gpus=[])  # a machine without GPUs: 2 GPU ranks could not start here
    receipt: dict = {}
    for attempt in range(2):  # torchrun's gloo teardown on a loaded 2-core box can abort after the run: retry once
        spec = _spec(tmp_path / f"a{attempt}", monkeypatch, "2")
        handle = ex.submit(spec)
        deadline = time.monotonic() + 240
        status = ex.poll([handle])[handle.trial_id]
        while status.state != "finished" and time.monotonic() < deadline:
            time.sleep(0.5)  # polling a condition with a deadline, not ordering processes
            status = ex.poll([handle])[handle.trial_id]
        assert status.state == "finished", status
        receipt = json.loads((spec.outdir / "receipt.json").read_text())
        if status.outcome == "ok":
            break
    log = (spec.outdir / "job.log").read_text()
    assert status.outcome == "ok", (status, log[-3000:])
    assert receipt["header"]["world_size"] == 2, receipt["header"]
    assert receipt["header"]["tokens_per_update"] == 1024  # 2 ranks x 4 micro-steps x 8 samples x 16 tokens
    assert [u["index"] for u in receipt["updates"]] == list(range(1, 7))
    assert all(u["tokens"] == 1024 and u["samples"] == 64 for u in receipt["updates"])
    assert "--nproc-per-node=2" in receipt["wrapper"]["argv"] and receipt["wrapper"]["errors"] == []
