"""Paths and helpers shared by the proposer tests (fixtures themselves live in conftest.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "nanogpt"
AGENTS = Path(__file__).resolve().parent / "agents"


def example_patch(name: str) -> str:
    """The text of one of the example's patch files."""
    return (EXAMPLE / "patches" / name).read_text()
