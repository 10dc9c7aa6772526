"""Fixtures for campaign tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.campaign.helpers import TOY, git_repo


@pytest.fixture
def toy_repo(tmp_path: Path) -> Path:
    """The toy workload copied into its own git repository."""
    return git_repo(TOY, tmp_path / "toy")
