"""examples/nanogpt/infrarsi.agent.yaml: the contract is valid, its scripted local agent runs under the agent
proposer (in the trial sandbox) and leaves a patch that passes intake, and the whole campaign runs (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infrarsi.controller.contract.loader import load_contract
from infrarsi.controller.proposers.base import PromptContext, build_proposers
from infrarsi.controller.settings import isolation_mode
from tests.campaign.helpers import cli_env, git_repo, infrarsi

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nanogpt"


def test_agent_contract_names_only_the_scripted_agent() -> None:
    contract = load_contract(EXAMPLE / "infrarsi.agent.yaml")
    (entry,) = contract.proposers.entries
    assert entry.kind == "agent" and entry.argv[:2] == ["python3", "agents/scripted_agent.py"]
    assert not entry.network and contract.patches.dir is None
    assert set(contract.editable_files) == {"train.py", "model.py"} and "agents/*.py" in contract.frozen_files


def test_scripted_agent_leaves_a_patch_that_passes_intake(tmp_path: Path) -> None:
    repo = git_repo(EXAMPLE, tmp_path / "nanogpt")
    contract = load_contract(repo / "infrarsi.agent.yaml")
    (agent,) = build_proposers(contract.proposers, contract=contract, repo=repo, workdir=tmp_path / "scratch",
                               isolation=isolation_mode())
    ctx = PromptContext(contract_yaml=(repo / "infrarsi.agent.yaml").read_text(),
                        editable_files={f: (repo / f).read_text() for f in ("train.py", "model.py")},
                        phase_breakdown={"forward": 0.4, "backward": 0.5, "optimizer": 0.1}, amdahl_ceiling=None)
    out = agent.propose(ctx)
    assert out.ok, out.reason
    (patch,) = out.proposal.patches
    assert "+++ b/model.py" in patch.diff and "skip activation recomputation" in patch.diff
    assert "recomputation" in patch.rationale and len(out.prompt_digest) == 64
    assert not (repo / "model.py").read_text().count("if False:")  # the agent edited a scratch copy only


@pytest.mark.slow
def test_agent_example_campaign_runs(tmp_path: Path) -> None:
    repo = git_repo(EXAMPLE, tmp_path / "nanogpt")
    env = cli_env(tmp_path / "home")
    run = infrarsi("run", "infrarsi.agent.yaml", env=env, cwd=repo, timeout=900)
    assert "asking proposer scripted-agent for patches" in run.stderr
    report_path = Path(run.stdout.strip().splitlines()[-1].split("report: ")[1])
    result = json.loads((report_path.parent / "result.json").read_text())
    agent = [p for p in result["proposers"]["patches"] if p["proposer"] == "scripted-agent"]
    assert agent and any(t["outcome"] == "ok" and agent[0]["name"] in t["patches"] for t in result["trials"])
    assert "scripted-agent" in report_path.read_text().split("## Proposers", 1)[1]
