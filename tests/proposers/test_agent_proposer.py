"""AgentProposer with a scripted agent command: under bubblewrap (as trials run) and unsandboxed; its diff, and
every way it can go wrong as a failed proposal with a one-line reason."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from infrarsi.controller.patches.intake import check_patch
from infrarsi.controller.proposers.agent import AgentProposer, unified_diff
from infrarsi.controller.proposers.base import PromptContext
from infrarsi.controller.proposers.spec import AgentSpec
from infrarsi.verifier import sandbox
from tests.proposers.proposer_fixtures import AGENTS, EXAMPLE

BWRAP_PROBLEM = sandbox.probe(sandbox.find_bwrap())
ISOLATIONS = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(
    BWRAP_PROBLEM is not None, reason=f"bubblewrap unavailable: {BWRAP_PROBLEM}"))]


def agent(rules, tmp_path: Path, mode: str, isolation: str, *, via_file: bool = True, timeout_s: float = 60,
          env: list[str] | None = None, environ: dict[str, str] | None = None, network: bool = False
          ) -> AgentProposer:
    argv = [sys.executable, str(AGENTS / "edit_agent.py"), "--mode", mode]
    if via_file:
        argv.append("{prompt_file}")
    spec = AgentSpec(kind="agent", name=f"stub-{mode}", command=argv, timeout_s=timeout_s, env=env or [],
                     network=network, ro_paths=[str(AGENTS)])
    base = {"PATH": os.environ.get("PATH", ""), "STUB_LLM_API_KEY": "sk-secret-llm-key",
            "INFRARSI_DATABASE_URL": "postgresql://postgres@127.0.0.1/infrarsi", "INFRARSI_HOME": "/tmp/x"}
    return AgentProposer(spec, rules=rules, workdir=tmp_path / "agents", isolation=isolation,
                         environ={**base, **(environ or {})})


def assert_failed(out, *words: str) -> None:
    assert not out.ok and out.proposal is None, out
    assert out.reason and "\n" not in out.reason
    for w in words:
        assert w in out.reason, out.reason


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("via_file", [True, False])
def test_good_agent_diff_is_the_proposal(rules, ctx: PromptContext, tmp_path: Path, isolation: str,
                                         via_file: bool) -> None:
    out = agent(rules, tmp_path, "good", isolation, via_file=via_file).propose(ctx)
    assert out.ok, out.reason
    (patch,) = out.proposal.patches
    assert "-        optimizer.zero_grad(set_to_none=False)\n+        optimizer.zero_grad(set_to_none=True)\n" \
        in patch.diff
    assert "__pycache__" not in patch.diff
    assert patch.rationale.startswith("Set zero_grad(set_to_none=True)") and patch.claimed_gain == 0.0
    info = check_patch(EXAMPLE, patch.diff, ["train.py", "model.py"], ["data.py"], 40)
    assert info.files == ("train.py",) and info.changed_lines == 2
    assert out.kind == "agent" and out.model == Path(sys.executable).name and out.tokens_in == 0
    assert not list((tmp_path / "agents").iterdir())  # the run folder is gone


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("mode, words", [
    ("frozen", ["frozen file 'data.py'"]),
    ("outside", ["created 'notes.txt', which is not an editable file"]),
    ("fail", ["agent exited 1: error: no API key configured for the agent"]),
    ("nothing", ["no change"]),
    ("binary", ["binary", "model.py"]),
    ("symlink", ["symlink"]),
])
def test_bad_agents_are_failed_proposals(rules, ctx, tmp_path: Path, isolation: str, mode: str,
                                         words: list[str]) -> None:
    out = agent(rules, tmp_path, mode, isolation).propose(ctx)
    assert_failed(out, *words)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_hanging_agent_is_killed_at_its_timeout(rules, ctx, tmp_path: Path, isolation: str) -> None:
    t0 = time.monotonic()
    out = agent(rules, tmp_path, "hang", isolation, timeout_s=2).propose(ctx)
    assert_failed(out, "did not finish within 2 s", "timeout")
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_agent_sees_only_the_env_it_is_given(rules, ctx, tmp_path: Path, isolation: str) -> None:
    """Controller secrets and the LLM key never reach the agent; a name listed in ``env`` does."""
    out = agent(rules, tmp_path, "leak", isolation, env=["STUB_AGENT_KEY", "INFRARSI_DATABASE_URL"],
                environ={"STUB_AGENT_KEY": "agent-key"}).propose(ctx)
    assert out.ok, out.reason


def test_missing_program_is_a_failed_proposal(rules, ctx, tmp_path: Path) -> None:
    spec = AgentSpec(kind="agent", name="ghost", command="no-such-agent-binary -p")
    out = AgentProposer(spec, rules=rules, workdir=tmp_path, isolation="none").propose(ctx)
    assert_failed(out, "cannot start agent command 'no-such-agent-binary'")


def test_unified_diff_applies_for_added_removed_and_unterminated_files(tmp_path: Path) -> None:
    before = {"a.py": b"x = 1\ny = 2\n", "gone.py": b"print(1)\n", "tail.py": b"a\nb"}
    after = {"a.py": b"x = 1\ny = 3\n", "new.py": b"z = 0\n", "tail.py": b"a\nc"}
    diff = unified_diff(before, after)
    repo = tmp_path / "r"
    repo.mkdir()
    for k, v in before.items():
        (repo / k).write_bytes(v)
    info = check_patch(repo, diff, ["*.py"], [], 100)
    assert set(info.files) == {"a.py", "gone.py", "new.py", "tail.py"}
    assert "\\ No newline at end of file" in diff


@pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=f"bubblewrap unavailable: {BWRAP_PROBLEM}")
def test_network_is_shared_only_when_asked(rules, ctx, tmp_path: Path) -> None:
    """network: false gives the agent a network namespace of its own (a service on the host's loopback is out of
    reach, as for a single-node trial); network: true shares the host's network (agents reach their API)."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        addr = f"127.0.0.1:{server.getsockname()[1]}"
        shut = agent(rules, tmp_path, "net", "bwrap", env=["STUB_NET_ADDR"], environ={"STUB_NET_ADDR": addr})
        assert_failed(shut.propose(ctx), "agent exited 6: no network")
        open_ = agent(rules, tmp_path, "net", "bwrap", env=["STUB_NET_ADDR"], environ={"STUB_NET_ADDR": addr},
                      network=True)
        out = open_.propose(ctx)
        assert out.ok, out.reason
    finally:
        server.close()
