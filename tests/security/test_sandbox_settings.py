"""The isolation setting: default bwrap, explicit opt-out (environment or daemon config file), loud warning,
one-line error for anything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.controller import settings
from infrarsi.controller.errors import InfrarsiError


def test_default_is_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFRARSI_ISOLATION", raising=False)
    monkeypatch.delenv("INFRARSI_CONFIG", raising=False)
    assert settings.isolation_mode() == "bwrap"


def test_opt_out_from_env_warns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("INFRARSI_ISOLATION", "none")
    monkeypatch.setattr(settings, "_warned_unisolated", False)
    assert settings.isolation_mode() == "none"
    assert "infrarsi: warning: isolation is off" in capsys.readouterr().err


def test_opt_out_from_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("isolation: none\n")
    monkeypatch.delenv("INFRARSI_ISOLATION", raising=False)
    monkeypatch.setenv("INFRARSI_CONFIG", str(cfg))
    assert settings.isolation_mode() == "none"


def test_bad_value_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFRARSI_ISOLATION", "docker")
    with pytest.raises(InfrarsiError, match=r"^INFRARSI_ISOLATION: 'docker' is not one of bwrap, none$"):
        settings.isolation_mode()
