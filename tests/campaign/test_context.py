"""``campaign/context.py`` directly: what follows from a campaign record alone (the parsed contract, cached per
campaign id; the effective launch section with ``infrarsi submit``'s sbatch options; one trial's GPUs; the judge
spec, which gains ``sigma_pair`` only once the doctor has measured it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.controller.campaign.context import CampaignContracts, parse_contract_yaml
from tests.campaign.engine_world import World, make_world, run_until


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def test_contract_is_parsed_once_per_campaign_and_kept_apart(world: World) -> None:
    eng = world.engine()
    a, b = world.campaign(eng), world.campaign(eng)
    cc = CampaignContracts()
    first = cc.contract(a)
    assert first.name == "toy" and [k.name for k in first.knobs] == ["speed", "chunk", "accum"]
    assert cc.contract(a) is first  # cached: a stored contract never changes
    assert cc.contract(b) is not first and cc.contract(b) == first  # another campaign, its own parse


def test_stored_yaml_round_trips_to_the_same_model(world: World) -> None:
    eng = world.engine()
    c = world.campaign(eng)
    assert parse_contract_yaml(c.contract_yaml) == CampaignContracts().contract(c)


def test_sbatch_options_override_the_contracts_launch_and_a_cpu_trial_takes_one_slot(world: World) -> None:
    eng = world.engine()
    plain = world.campaign(eng)
    submitted = world.campaign(eng, sbatch={"partition": "gpu", "time": "00:05:00"})
    cc = CampaignContracts()
    assert cc.launch_of(plain).partition == cc.contract(plain).launch.partition
    assert cc.launch_of(submitted).partition == "gpu" and cc.launch_of(submitted).time_limit == "0-00:05:00"
    assert cc.devices(plain) == 1  # gpus_per_node 0: one slot, never zero


def test_judge_spec_gains_sigma_pair_only_after_doctor(world: World) -> None:
    eng = world.engine()
    c = world.campaign(eng)
    c = run_until(eng, c.id, lambda c: c.state == "doctor")
    locked = CampaignContracts.judge_spec(c)  # scope locked, noise not yet measured
    assert locked.sigma_pair is None and locked.updates == 8 and tuple(locked.window) == (3, 8)
    c = run_until(eng, c.id, lambda c: c.state == "run")
    after = CampaignContracts.judge_spec(c)
    assert after.sigma_pair == pytest.approx(c.doctor["sigma_pair"]) and after.sigma_pair > 0
    assert (after.updates, tuple(after.window)) == (locked.updates, tuple(locked.window))
