"""Fixtures for the proposer tests: the nanoGPT example as the (read-only) repository, its contract and rules."""

from __future__ import annotations

import pytest

from infrarsi.controller.contract import load_contract
from infrarsi.controller.proposers.base import PatchRules, PromptContext

from tests.proposers.proposer_fixtures import EXAMPLE


@pytest.fixture(scope="session")
def contract():
    return load_contract(EXAMPLE / "infrarsi.yaml")


@pytest.fixture(scope="session")
def rules(contract) -> PatchRules:
    return PatchRules.from_contract(contract, EXAMPLE)


@pytest.fixture
def ctx() -> PromptContext:
    return PromptContext(contract_yaml=(EXAMPLE / "infrarsi.yaml").read_text(),
                         editable_files={p: (EXAMPLE / p).read_text() for p in ("train.py", "model.py")},
                         phase_breakdown={"forward": 0.4, "backward": 0.45, "optimizer": 0.1, "data": 0.05},
                         amdahl_ceiling=2.5, kind="patches")
