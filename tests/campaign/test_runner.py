"""``campaign/runner.py`` directly: which campaign a command in a repo means (``find_campaign``: newest,
non-terminal unless asked, and only while the contract is unchanged) and ``drive`` (tick to a target state; a drain
stops launching, waits for live trials and leaves the campaign resumable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.controller.campaign.runner import create_campaign, drive, find_campaign
from tests.campaign.engine_world import World, make_world


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def test_create_records_init_and_nothing_runs(world: World) -> None:
    eng = world.engine()
    c = create_campaign(eng.store, world.settings, world.repo / "infrarsi.yaml", executor="inprocess", seed=3)
    assert (c.state, c.name, c.seed, c.executor) == ("init", "toy", 3, "inprocess")
    assert c.budget_trials == 4 and not eng.store.list_trials(c.id)
    assert not world.cluster.ran


def test_find_campaign_is_the_newest_live_one_with_an_unchanged_contract(world: World) -> None:
    eng = world.engine()
    contract = world.repo / "infrarsi.yaml"
    older, newer = world.campaign(eng), world.campaign(eng)
    assert find_campaign(eng.store, contract).id == newer.id != older.id
    eng.store.update_campaign(newer.id, state="failed", error="test")  # terminal: skipped unless asked
    assert find_campaign(eng.store, contract).id == older.id
    assert find_campaign(eng.store, contract, include_terminal=True).id == newer.id
    contract.write_text(contract.read_text().replace("trials: 4", "trials: 5"))  # another contract now
    assert find_campaign(eng.store, contract) is None


def test_drive_stops_at_the_target_state(world: World) -> None:
    eng = world.engine()
    c = world.campaign(eng)
    c = drive(eng, c.id, until="run", poll_s=0.0)
    assert c.state == "run"
    assert {t.stage for t in eng.store.list_trials(c.id)} == {"reference"}
    c = drive(eng, c.id, poll_s=0.0)
    assert c.state == "done", c.error


def test_a_drain_stops_launching_waits_for_live_trials_and_can_resume(world: World) -> None:
    eng = world.engine()
    c = world.campaign(eng)
    c = drive(eng, c.id, until="run", poll_s=0.0)
    c = drive(eng, c.id, poll_s=0.0, drain_after_s=0.0)
    assert not c.terminal and not eng.store.live_trials([c.id])  # nothing left running, nothing lost
    before = len(eng.store.list_trials(c.id))
    again = world.engine()  # a later `infrarsi run` resumes it
    c = drive(again, c.id, poll_s=0.0)
    assert c.state == "done", c.error
    assert len(again.store.list_trials(c.id)) >= before
