"""Issue 12's done-when, end to end on the CPU: the nanogpt example with a language model and a coding agent as
proposers.  The model is a scripted OpenAI-compatible server on 127.0.0.1 (a good patch and a cheating patch that
skips micro-steps in one answer, then garbage); the agent is the example's scripted local agent run in the trial
sandbox.  The cheat is rejected by the verifier, the good patch verified and promoted, and REPORT.md names the
proposers, what they cost and which patch came from which."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.campaign.helpers import cli_env, git_env, git_repo, infrarsi
from tests.campaign.stub_llm import StubLLM, edit_diff, proposal

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nanogpt"
LAYERS = ("L0", "L1", "L2", "L3", "L4", "L5")


def _agent_edit(name: str) -> tuple[str, str, str]:
    """(file, old, new) of one of the scripted agent's edits (examples/nanogpt/agents/scripted_agent.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("scripted_agent", EXAMPLE / "agents" / "scripted_agent.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    rel, old, new, _ = mod.EDITS[name]
    return rel, old, new


def _contract(repo: Path, url: str) -> str:
    text = (repo / "infrarsi.agent.yaml").read_text()
    head, _ = text.split("proposers:\n", 1)
    head = head.replace("name: nanogpt-tiny-agent", "name: nanogpt-tiny-proposers")
    return head + f"""proposers:
  max_concurrent: 2
  entries:
    - kind: llm
      name: stub-llm
      base_url: {url}
      model: stub-coder-1
      api_key_env: STUB_LLM_KEY
      max_retries: 1
      timeout_s: 60
      price_in: 2.0
      price_out: 8.0
    - kind: agent
      name: scripted-agent
      command: "python3 agents/scripted_agent.py {{prompt_file}} --edit no-item-sync"
      timeout_s: 120
      network: false
"""


@pytest.mark.slow
def test_campaign_with_a_stub_llm_and_a_scripted_agent(tmp_path: Path) -> None:
    import subprocess

    repo = git_repo(EXAMPLE, tmp_path / "nanogpt")
    rel, old, new = _agent_edit("no-recompute")
    source = (repo / rel).read_text()
    good = edit_diff(str(repo / rel), source, source.replace(old, new, 1), rel)
    cheat = (repo / "patches" / "skip_microsteps.diff").read_text()
    answers = [proposal(patches=[
        {"diff": good, "rationale": "skip activation recomputation: the model fits in memory", "claimed_gain": 0.4},
        {"diff": cheat, "rationale": "fewer micro-steps per update", "claimed_gain": 0.6},
    ]), "I could not decide; here are my thoughts instead of JSON."]
    asked = {"patches": 0}

    def answer(prompt: str) -> str:
        if "Estimate how each knob value" in prompt:  # the doctor's priors request
            return proposal(priors=[{"knob": "optimizer_impl", "value": "foreach", "mean_log_speedup": 0.03,
                                     "spread": 0.05}])
        i = asked["patches"]
        asked["patches"] += 1
        return answers[min(i, len(answers) - 1)]

    with StubLLM([answer], tokens=(3000, 400)) as llm:
        (repo / "infrarsi.e2e.yaml").write_text(_contract(repo, llm.base_url))
        for args in (["add", "infrarsi.e2e.yaml"], ["commit", "-qm", "e2e contract"]):
            subprocess.run(["git", "-C", str(repo), *args], check=True, env=git_env())
        env = cli_env(tmp_path / "home", STUB_LLM_KEY="sk-stub-not-a-secret")
        t0 = time.monotonic()
        run = infrarsi("run", "infrarsi.e2e.yaml", env=env, cwd=repo, timeout=900)
        elapsed = time.monotonic() - t0
    log = run.stderr
    report_path = Path(run.stdout.strip().splitlines()[-1].split("report: ")[1])
    result = json.loads((report_path.parent / "result.json").read_text())
    report = report_path.read_text()
    props = result["proposers"]
    print(f"e2e proposers campaign: {elapsed:.0f} s, {len(result['trials'])} trials")  # shown with -s

    # provenance: which proposer produced which patch, with the prompt's digest
    by_name = {p["name"]: p for p in props["patches"]}
    llm_patches = [p for p in props["patches"] if p["proposer"] == "stub-llm"]
    agent_patches = [p for p in props["patches"] if p["proposer"] == "scripted-agent"]
    assert len(llm_patches) == 2 and agent_patches, props["patches"]
    assert all(re.fullmatch(r"[0-9a-f]{64}", p["prompt_digest"] or "") for p in llm_patches + agent_patches)
    good_name = next(p["name"] for p in llm_patches if p["claimed_gain"] == 0.4)
    cheat_name = next(p["name"] for p in llm_patches if p["claimed_gain"] == 0.6)

    # the cheat (skips half the micro-steps) ran and was rejected by the verifier, no later than L3
    cheat_trials = [t for t in result["trials"] if cheat_name in t["patches"]]
    assert cheat_trials and all(t["outcome"] != "ok" for t in cheat_trials), cheat_trials
    judged = [t for t in cheat_trials if t["outcome"] == "rejected"]
    assert judged and all(LAYERS.index(t["first_failed_layer"]) <= LAYERS.index("L3") for t in judged), judged
    assert by_name[cheat_name]["status"].startswith("rejected by the verifier")

    # the good patch was verified and promoted (with the reason when this machine's noise forbade it)
    assert any(t["outcome"] == "ok" and good_name in t["patches"] for t in result["trials"] if t["stage"] == "search")
    # quiet means quiet through the promotion too: its margin comes from sigma_pair pooled over every repeat
    # (noise_bound), which load during the re-runs raises above the doctor's estimate
    sigma = max(result["reference"]["sigma_pair"], (result.get("noise_bound") or {}).get("sigma_pair") or 0.0)
    if result["promoted"] is not None or sigma < 0.05:
        assert result["promoted"] is not None, result["reason"]
        assert good_name in result["promoted"]["patches"] and result["delivered_speedup"] > 1.0
        assert by_name[good_name]["status"] == "promoted"
        assert f"{result['delivered_speedup']:.2f}x" in report
    else:  # a heavily loaded machine: nothing may be promoted, and the report says why
        assert result["delivered_speedup"] == 1.0 and result["reason"] in report

    # the garbage answer is a failed request with a one-line reason; the campaign went on
    rounds = props["rounds"]
    assert any(r["proposer"] == "stub-llm" and not r["ok"] and "not JSON" in r["reason"] for r in rounds), rounds
    assert result["campaign"]["state"] in ("report", "done")

    # the ledger: every request with tokens and money for the model, wall time for the agent
    ledger = {b["proposer"]: b for b in props["by_proposer"]}
    assert ledger["stub-llm"]["requests"] == llm.requests >= 3  # priors at doctor, patches, garbage
    assert ledger["stub-llm"]["tokens_in"] == 3000 * llm.requests
    assert ledger["stub-llm"]["usd"] == pytest.approx(llm.requests * (3000 * 2.0 + 400 * 8.0) / 1e6)
    assert ledger["scripted-agent"]["requests"] >= 1 and ledger["scripted-agent"]["wall_s"] > 0
    assert props["priors"] and props["priors"][0]["knob"] == "optimizer_impl"

    # REPORT.md names the proposers and their cost next to the trials' hours, and each patch's source
    section = report[report.index("## Proposers"):report.index("## Memory model")]
    assert "stub-llm" in section and "scripted-agent" in section and "stub-coder-1" in section
    assert f"{props['totals']['tokens_in']:,} tokens in" in section and "$" in section
    assert "CPU-hours" in section or "GPU-hours" in section
    assert good_name in section and cheat_name in section
    assert "sk-stub-not-a-secret" not in report and "sk-stub-not-a-secret" not in log
    assert "asking proposer stub-llm for patches" in log
