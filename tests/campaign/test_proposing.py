"""Proposers inside the campaign (controller/campaign/proposing.py) on the fast toy world: which proposers are on,
priors at doctor, patch requests during run, provenance, the ledger, concurrency and replay after a restart.

The one fake is the remote model: a scripted OpenAI-compatible server on 127.0.0.1 (tests/campaign/stub_llm.py)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from infrarsi.controller.campaign import proposing
from infrarsi.controller.campaign.searchglue import search_space
from infrarsi.controller.contract.loader import load_contract
from infrarsi.controller.proposers.spec import ProposersSpec
from tests.campaign.engine_world import World, make_world, run_until
from tests.campaign.helpers import git_env
from tests.campaign.stub_llm import StubLLM, edit_diff, proposal


def _contract_with(world: World, section: str) -> None:
    """Rewrite the toy contract with a ``proposers:`` section (and commit it: it is a frozen file)."""
    path = world.repo / "infrarsi.yaml"
    path.write_text(path.read_text() + section)
    subprocess.run(["git", "-C", str(world.repo), "commit", "-qam", "proposers"], check=True, env=git_env())


def _good_patch(repo: Path, tag: str = "harmless") -> str:
    old = (repo / "train.py").read_text()
    return edit_diff(str(repo / "train.py"), old, old.replace("import argparse\n", f"import argparse  # {tag}\n", 1),
                     "train.py")


def _frozen_patch(repo: Path) -> str:
    old = (repo / "infrarsi.yaml").read_text()
    return edit_diff(str(repo / "infrarsi.yaml"), old, old.replace("name: toy", "name: toy2", 1), "infrarsi.yaml")


LLM = """proposers:
  max_concurrent: {conc}
  entries:
    - kind: llm
      name: stub
      base_url: {url}
      model: stub-1
      max_retries: 0
      price_in: 1.0
      price_out: 2.0
"""


# ------------------------------------------------------------------------------------------- which proposers are on
def test_default_is_the_folder_only_and_the_site_default_fills_in(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    contract = load_contract(world.repo / "infrarsi.yaml")
    assert proposing.effective_proposers(contract).entries == []  # no patch folder, no proposer
    site = ProposersSpec.model_validate([{"kind": "catalog"}])
    assert [e.kind for e in proposing.effective_proposers(contract, site).entries] == ["catalog"]
    with_dir = contract.model_copy(update={"patches": contract.patches.model_copy(update={"dir": "p"})})
    assert [e.kind for e in proposing.effective_proposers(with_dir).entries] == ["folder"]
    assert [e.kind for e in proposing.effective_proposers(with_dir, site).entries] == ["folder", "catalog"]
    _contract_with(world, "proposers: [{kind: catalog, name: mine}]\n")
    own = load_contract(world.repo / "infrarsi.yaml")
    assert [e.name for e in proposing.effective_proposers(own, site).entries] == ["mine"]  # the contract wins


# ------------------------------------------------------------------------------------------- doctor priors
def test_doctor_asks_for_priors_freezes_them_and_books_the_cost(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    answer = proposal(priors=[
        {"knob": "speed", "value": "4", "mean_log_speedup": 0.9, "spread": 0.3, "mem_gib": 1.0},
        {"knob": "speed", "value": "1", "mean_log_speedup": 0.5, "spread": 0.1},  # the reference: dropped
        {"knob": "warp", "value": "9", "mean_log_speedup": 0.5, "spread": 0.1},  # no such knob: dropped
    ])
    with StubLLM([answer]) as llm:
        _contract_with(world, LLM.format(conc=1, url=llm.base_url))
        engine = world.engine()
        cid = world.campaign(engine).id
        c = run_until(engine, cid, lambda c: c.state not in ("init", "doctor"), seconds=120)
        assert llm.requests == 1
    rows = c.doctor["proposer_priors"]
    assert [(r["knob"], r["value"], r["mean"], r["spread"]) for r in rows] == [("speed", 4, 0.9, 0.3)]
    assert any("speed=1: the reference value" in d for d in c.doctor["proposer_priors_dropped"])
    ledger = engine.store.proposer_requests(cid)
    assert [(r.stage, r.request, r.outcome, r.tokens_in, r.tokens_out) for r in ledger] == \
        [("doctor", "priors", "ok", 1000, 200)]
    assert ledger[0].usd == pytest.approx((1000 * 1.0 + 200 * 2.0) / 1e6)
    contract = engine.contract(c)
    space = search_space(contract, [], rows)
    assert space.knob("speed").prior_of(4) == 0.9 and space.knob("speed").prior_of(2) == 0.0
    ctrl = engine.search_for(c)
    i = ctrl.fmap.index[("speed", 4)]
    assert ctrl.prior_mu[i] == pytest.approx(0.9) and ctrl.prior_sd[i] >= 0.45  # floored at 0.5 |mu|


def test_a_slow_model_at_doctor_never_blocks_a_tick(tmp_path: Path) -> None:
    """The daemon ticks every campaign in one loop: a model that takes seconds to answer the doctor's prior request
    must not hold the tick (nor any other campaign) for those seconds."""
    world = make_world(tmp_path)
    answer = proposal(priors=[{"knob": "speed", "value": "4", "mean_log_speedup": 0.9, "spread": 0.3}])
    with StubLLM([answer], delay_s=5.0) as llm:
        _contract_with(world, LLM.format(conc=1, url=llm.base_url))
        engine = world.engine()
        cid = world.campaign(engine).id
        run_until(engine, cid, lambda c: any("for knob priors" in ln for ln in world.log), seconds=120)
        t0 = time.monotonic()
        c = engine.tick(cid)
        assert time.monotonic() - t0 < 4.0 and c.state == "doctor" and c.doctor is None  # asked, not waited for
        c = run_until(engine, cid, lambda c: c.state not in ("init", "doctor"), seconds=120)
    assert llm.requests == 1 and c.doctor["proposer_priors"][0]["knob"] == "speed"
    assert [r.stage for r in engine.store.proposer_requests(cid)] == ["doctor"]  # one row, written once


def test_a_failing_model_at_doctor_is_a_ledger_row_not_a_failed_campaign(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    with StubLLM(["this is not json"]) as llm:
        _contract_with(world, LLM.format(conc=1, url=llm.base_url))
        engine = world.engine()
        cid = world.campaign(engine).id
        c = run_until(engine, cid, lambda c: c.state not in ("init", "doctor"), seconds=120)
    assert c.state == "run" and c.doctor["proposer_priors"] == []
    (row,) = engine.store.proposer_requests(cid)
    assert row.outcome == "failed" and "not JSON" in row.reason


# ------------------------------------------------------------------------------------------- patches during run
def _patch_world(tmp_path: Path, answers: list, conc: int = 1, trials: int = 4) -> tuple[World, StubLLM]:
    world = make_world(tmp_path)
    llm = StubLLM(answers)
    section = LLM.format(conc=conc, url=llm.base_url)
    path = world.repo / "infrarsi.yaml"
    # a tiny knob table (speed 1 or 2 only), so the configuration upside runs out after a trial or two
    text = path.read_text().replace("values: [1, 2, 4]", "values: [1, 2]").replace("trials: 4", f"trials: {trials}")
    path.write_text(text)
    _contract_with(world, section)
    return world, llm


def test_run_asks_for_patches_when_the_upside_is_gone_and_records_provenance_before_use(tmp_path: Path) -> None:
    world, llm = _patch_world(tmp_path, [proposal(), None])  # doctor: no priors; run: set below
    good = _good_patch(world.repo)
    llm.answers = [proposal(), proposal(patches=[
        {"diff": good, "rationale": "a harmless comment", "claimed_gain": 0.9},
        {"diff": _frozen_patch(world.repo), "rationale": "rename the workload", "claimed_gain": 0.5},
    ]), "garbage"]
    with llm:
        engine = world.engine()
        cid = world.campaign(engine).id
        c = run_until(engine, cid, lambda c: c.state == "done", seconds=300)
        assert c.state == "done", c.error
    scope = c.scope
    mine = [n for n, p in scope["patch_provenance"].items() if p["proposer"] == "stub"]
    accepted = [n for n in mine if n in scope["patches"]]
    refused = [n for n in mine if n in scope["refused_patches"]]
    assert len(accepted) == 1 and len(refused) == 1, scope["patch_provenance"]
    prov = scope["patch_provenance"][accepted[0]]
    assert prov["claimed_gain"] == 0.9 and prov["prior_input"] == proposing.CLAIM_CAP
    assert prov["prior_mean"] == pytest.approx(0.5 * proposing.CLAIM_CAP) and len(prov["prompt_digest"]) == 64
    assert "frozen" in scope["refused_patches"][refused[0]]
    # the accepted patch ran in a search trial (same intake, same isolated trees, same verifier)
    assert any(accepted[0] in t.patches for t in engine.store.list_trials(cid, stages=["search"]))
    ledger = engine.store.proposer_requests(cid)
    assert [r.request for r in ledger][:2] == ["priors", "patches"]
    assert all(r.prompt_digest for r in ledger)
    # the controller shrinks the claim: prior mean = patch_kappa x capped claim
    ctrl = engine.search_for(c)
    assert ctrl.tune["patch_priors"][accepted[0]] == proposing.CLAIM_CAP
    # the report section names the proposer, its cost and the patch's fate
    result = proposing.proposers_result(engine.store, c)
    (stub,) = [b for b in result["by_proposer"] if b["proposer"] == "stub"]
    assert stub["requests"] == len(ledger) and stub["tokens_in"] == 1000 * len(ledger)
    statuses = {p["name"]: p["status"] for p in result["patches"]}
    assert statuses[refused[0]] == "refused at intake" and statuses[accepted[0]] != "not tried"


def test_a_restarted_engine_reuses_recorded_answers_and_never_asks_twice(tmp_path: Path) -> None:
    world, llm = _patch_world(tmp_path, [proposal()], trials=6)
    llm.answers = [proposal(), proposal(patches=[{"diff": _good_patch(world.repo), "rationale": "r",
                                                  "claimed_gain": 0.05}]), proposal()]
    with llm:
        engine = world.engine()
        cid = world.campaign(engine).id
        c = run_until(engine, cid, lambda c: any(p.get("proposer") == "stub"
                                                for p in (c.scope or {}).get("patch_provenance", {}).values()),
                      seconds=300)
        asked = llm.requests
        before = engine.search_for(c)
        fresh = world.engine()  # a new process over the same database
        after = fresh.search_for(fresh.store.get_campaign(cid))
        assert after.space.patches == before.space.patches and len(after.space.patches) == 1
        assert after.ask(1) == before.ask(1)  # the same next proposal: the answer is replayed, not re-asked
        assert llm.requests == asked


def test_never_more_requests_in_flight_than_configured(tmp_path: Path) -> None:
    # two llm proposers on one endpoint, max_concurrent 1: their requests never overlap at the server
    world = make_world(tmp_path)
    path = world.repo / "infrarsi.yaml"
    path.write_text(path.read_text().replace("values: [1, 2, 4]", "values: [1, 2]"))
    with StubLLM([proposal()], delay_s=0.3) as llm:
        entries = "".join(f"""    - kind: llm
      name: stub{i}
      base_url: {llm.base_url}
      model: stub-1
      max_retries: 0
""" for i in range(2))
        _contract_with(world, f"proposers:\n  max_concurrent: 1\n  entries:\n{entries}")
        engine = world.engine()
        cid = world.campaign(engine).id
        runner = engine.proposers
        seen = 0
        c = engine.store.get_campaign(cid)
        deadline = time.monotonic() + 300  # the answers come on background threads (0.3 s each): seconds, not ticks
        while time.monotonic() < deadline:
            c = engine.tick(cid)
            seen = max(seen, runner.in_flight(cid))
            if c.state in ("verify", "report", "done", "failed"):
                break
        assert c.state != "failed", c.error
        assert seen <= 1 and llm.max_active <= 1
        assert llm.requests >= 3  # priors from both at doctor, and at least one patch request


def test_verified_patches_that_conflict_when_stacked_are_sent_back_for_completion(tmp_path: Path) -> None:
    # two patches edit the same line: each is faster on its own (the job reads its source), their stack does not
    # apply; the search then asks for a ``complete`` request showing both verified diffs, and runs the answer
    from infrarsi.controller.executors.inprocess import knob, scripted_receipt
    from tests.campaign.engine_world import BASE_STEP_S

    def step(run) -> float:  # type: ignore[no-untyped-def]
        src = (Path(run.spec.workdir) / "train.py").read_text()
        factor = 0.8 ** sum(tag in src for tag in ("fast-a", "fast-b"))
        return BASE_STEP_S / int(knob(run, "speed") or 1) * factor

    world, llm = _patch_world(tmp_path, [proposal()], trials=16)
    a, b = _good_patch(world.repo, "fast-a"), _good_patch(world.repo, "fast-b")
    both = _good_patch(world.repo, "fast-a fast-b")

    def answer(prompt: str) -> str:
        if "Each verified patch below passed" in prompt:
            return proposal(patches=[{"diff": both, "rationale": "both edits in one", "claimed_gain": 0.4}])
        return proposal(patches=[{"diff": a, "rationale": "a", "claimed_gain": 0.2},
                                 {"diff": b, "rationale": "b", "claimed_gain": 0.2}])

    llm.answers = [proposal(), answer]
    with llm:
        engine = world.engine(world.executor(scripted_receipt(step_time_s=step)))
        cid = world.campaign(engine).id
        # the model answers on a background thread: a deadline in seconds, not in ticks (a loaded machine answers
        # slower than an idle engine ticks)
        deadline = time.monotonic() + 300
        c = engine.store.get_campaign(cid)
        while c.state in ("init", "doctor", "run"):
            assert time.monotonic() < deadline, f"campaign {cid} stuck in {c.state}\n" + "\n".join(world.log)
            c = engine.tick(cid)
        assert c.state != "failed", c.error
        assert any("Each verified patch below passed" in p for p in llm.prompts), "\n".join(world.log)
    rounds = c.scope["proposal_rounds"]
    complete = [r for r in rounds if r["kind"] == "complete"]
    assert complete and len(complete[0]["stack"]) == 2 and complete[0]["patches"], rounds
    trials = engine.store.list_trials(cid, stages=["search"])
    assert any(t.outcome == "crash" and "patch conflict" in (t.reason or "") for t in trials)
    # the completion is tried in place of the two patches it combines (not stacked on them) and verified
    done = [t for t in trials if complete[0]["patches"][0] in t.patches]
    assert done and all(t.outcome == "ok" and len(t.patches) == 1 for t in done), done
