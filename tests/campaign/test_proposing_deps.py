"""``controller/campaign/proposing.py`` through its narrow dependency (:class:`ProposerDeps`: the store, the
contract of a campaign, a progress line), never the engine: the runner, the prompt context and the report section
built from a finished toy campaign on the memory store (fast, no model: the ``catalog`` proposer is local)."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import pytest

from infrarsi.controller.campaign import proposing
from infrarsi.controller.campaign.context import CampaignContracts
from infrarsi.controller.proposers.spec import ProposersSpec
from infrarsi.controller.store.stage_records import doctor_of
from tests.campaign.engine_world import finished_campaign, make_world, run_until


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory):
    return finished_campaign(tmp_path_factory.mktemp("proposing"))


def test_proposing_never_imports_the_engine() -> None:
    src = inspect.getsource(proposing)
    assert "campaign.engine" not in src and "CampaignEngine" not in src


def test_build_context_reads_only_the_store_and_the_contract(done) -> None:
    world, eng, c = done
    contract = CampaignContracts().contract(c)
    ctx = proposing.build_context(eng.store, contract, c, "patches", world.repo)
    search = [t for t in eng.store.list_trials(c.id, stages=["search"]) if t.status == "ingested"]
    assert ctx.kind == "patches" and len(ctx.trials) == len(search) > 0
    assert set(ctx.editable_files) == {"train.py"} and ctx.contract_yaml == c.contract_yaml
    t0 = doctor_of(c).t0
    assert all(s.speedup == pytest.approx(t0 / s.step_time_s) for s in ctx.trials if s.step_time_s)
    assert ctx.verified_patches == () and ctx.rejected_patches == ()


def test_proposers_result_from_the_store(done) -> None:
    _, eng, c = done
    result = proposing.proposers_result(eng.store, c)
    assert result["totals"]["requests"] == 0 and result["by_proposer"] == [] and result["patches"] == []
    assert result["priors"] == [] and result["rounds"] == []


def test_a_runner_built_from_deps_alone_asks_for_priors_and_books_them(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    eng = world.engine()
    c = run_until(eng, world.campaign(eng).id, lambda c: c.state == "run")
    said: list[str] = []
    contracts = CampaignContracts()
    deps = proposing.ProposerDeps(store=eng.store, contract_of=contracts.contract, progress=said.append)
    runner = proposing.ProposerRunner(deps, ProposersSpec.model_validate([{"kind": "catalog"}]))
    doctor = doctor_of(c)
    bare = proposing.ProposerRunner(deps, ProposersSpec(entries=[]))
    bare.ask_priors(c, doctor)  # nobody gives priors: nothing is asked, nothing to collect
    assert bare.priors_status(c) == "none" and bare.collect_priors(c, doctor) is None
    assert runner.priors_status(c) == "unasked" and runner.collect_priors(c, doctor) is None
    assert eng.store.proposer_requests(c.id) == []  # a status read asks nobody and books nothing
    runner.ask_priors(c, doctor)  # in the background
    runner.ask_priors(c, doctor)  # asked once
    deadline = time.monotonic() + 30
    while runner.priors_status(c) == "pending":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert runner.priors_status(c) == "ready" and eng.store.proposer_requests(c.id) == []
    priors = runner.collect_priors(c, doctor)
    assert priors is not None and runner.priors_status(c) == "unasked"
    assert set(priors) == {"proposer_priors", "proposer_priors_dropped"}
    assert [(r.stage, r.request, r.outcome) for r in eng.store.proposer_requests(c.id)] == [
        ("doctor", "priors", "ok")]
    assert said[0] == f"[{c.id}] asking 1 proposer(s) for knob priors" and "ok" in said[-1]
    assert not runner.busy(c.id)
    # no llm/agent proposer: the run step does nothing and asks nobody
    assert runner.step(c, lambda: pytest.fail("the search is not rebuilt"), []) is False
    runner.close()


def test_the_engine_hands_its_runner_the_narrow_deps(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    eng = world.engine()
    runner = eng.proposers
    assert runner is eng.proposers and runner.deps.store is eng.store
    assert not hasattr(runner, "engine")
    eng.progress("[0] hello")  # the runner's progress is the engine's, read when called
    runner.deps.progress("[0] via deps")
    assert world.log[-2:] == ["[0] hello", "[0] via deps"]
