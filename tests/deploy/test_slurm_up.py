"""deploy/: the bring-up script is idempotent on the real cluster; the unit and
example configuration are well-formed and build an executor."""

from __future__ import annotations

import os
import shutil
import subprocess
from configparser import ConfigParser
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from infrarsi.controller.executors import make_executor
from infrarsi.controller.executors.slurm import SlurmExecutor

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _pid(path: str) -> str:
    return Path(path).read_text().strip()


@pytest.mark.parametrize("script", ["slurm-up.sh", "slurm-down.sh"])
def test_scripts_are_valid_posix_sh(script: str) -> None:
    path = DEPLOY / script
    assert os.access(path, os.X_OK)
    r = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.slurm
def test_second_run_is_a_noop() -> None:
    if shutil.which("sinfo") is None:
        pytest.skip("Slurm is not installed (no sinfo on PATH): run deploy/slurm-up.sh as root")
    if os.geteuid() != 0:
        pytest.skip("deploy/slurm-up.sh needs root")
    first = subprocess.run([str(DEPLOY / "slurm-up.sh")], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    pids = {p: _pid(p) for p in ("/run/slurm/slurmctld.pid", "/run/slurm/slurmd.pid", "/run/munge/munged.pid")}
    conf_mtime = Path("/etc/slurm/slurm.conf").stat().st_mtime_ns
    second = subprocess.run([str(DEPLOY / "slurm-up.sh")], capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "already up" in second.stdout
    assert {p: _pid(p) for p in pids} == pids, "a second run restarted a daemon"
    assert Path("/etc/slurm/slurm.conf").stat().st_mtime_ns == conf_mtime
    gres = subprocess.run(["sinfo", "-h", "-N", "-o", "%G"], capture_output=True, text=True).stdout
    assert "gpu:2" in gres


def test_systemd_unit_is_well_formed() -> None:
    unit = ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "infrarsi.service")
    assert unit["Service"]["ExecStart"].split()[-1] == "serve"
    assert unit["Service"]["KillMode"] == "process"  # trials survive a daemon restart
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    env = dict(line.split("=", 1) for line in (DEPLOY / "infrarsi.example.env").read_text().splitlines()
               if line and not line.startswith("#"))
    assert env["INFRARSI_DATABASE_URL"].startswith("postgresql")


def test_example_configuration_builds_the_executor(tmp_path: Path) -> None:
    cfg = YAML(typ="safe").load((DEPLOY / "infrarsi.example.yaml").read_text())
    opts = dict(cfg["executor"]["options"], state_dir=str(tmp_path))
    ex = make_executor(cfg["executor"]["name"], **opts)
    assert isinstance(ex, SlurmExecutor)
    assert ex.backoff == [2.0, 4.0, 8.0] and ex.steady_interval_s == 60.0
    assert "--qos=infrarsi" in ex.extra_sbatch


def test_example_slurm_conf_matches_what_the_script_writes() -> None:
    script = (DEPLOY / "slurm-up.sh").read_text()
    example = (DEPLOY / "examples" / "slurm.conf").read_text()
    for line in example.splitlines():
        if not line or line.startswith(("#", "NodeName", "PartitionName", "SlurmctldHost")):
            continue
        key = line.split("=", 1)[0]
        assert f"\n{key}=" in script, f"{key} in the example is not written by slurm-up.sh"
