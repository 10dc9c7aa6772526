"""INFRARSI_CONFIG: the example file loads, and an unknown key is a one-line error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.controller.config import _load, daemon_config
from infrarsi.controller.errors import InfrarsiError

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "infrarsi.example.yaml"


def test_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFRARSI_CONFIG", str(EXAMPLE))
    cfg = daemon_config()
    assert cfg.executor.name == "slurm" and cfg.executor.options["steady_interval_s"] == 60
    assert cfg.partition_limits == {"gpu": 64, "debug": 4}
    from infrarsi.controller.executors.slurm import SlurmExecutor

    SlurmExecutor(**{**cfg.executor.options, "state_dir": "/tmp/x"})  # every option is a real argument


def test_unknown_key_names_it(tmp_path: Path) -> None:
    bad = tmp_path / "d.yaml"
    bad.write_text("executor: {name: slurm}\nscratch: /x\n")
    with pytest.raises(InfrarsiError, match="d.yaml: scratch: Extra inputs are not permitted"):
        _load(str(bad))
