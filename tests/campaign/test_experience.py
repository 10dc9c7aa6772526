"""Experience write-back feeds the next campaign's search, frozen at doctor time (controller/experience/doctor.py):
effects of this contract's mechanisms become per-setting priors on searched knobs with values from the knob
table; other frameworks are discarded; every searched knob gets a coverage grade."""

from __future__ import annotations

from pathlib import Path

from infrarsi.controller.campaign.engine import CampaignEngine, parse_contract_yaml
from infrarsi.controller.campaign.runner import create_campaign, executor_factory
from infrarsi.controller.experience.environment import campaign_environment
from infrarsi.controller.experience.records import Effect, Environment
from infrarsi.controller.settings import Settings
from infrarsi.controller.store import open_store


def _eff(env: Environment, mech: str, value: str, ls: float, trial: str) -> Effect:
    return Effect(environment=env.digest(), mechanism=mech, value=value, klass="balance", log_speedup=ls,
                  noise_floor=0.01, conditioning={}, tier="verified-search", campaign="toy#99", trial=trial, env=env)


def test_experience_snapshot_maps_values_and_filters(tmp_path: Path, toy_repo: Path, infrarsi_home: Path) -> None:
    settings = Settings.from_env()
    store = open_store()
    c = create_campaign(store, settings, toy_repo / "infrarsi.yaml", executor="local")
    contract = parse_contract_yaml(c.contract_yaml)
    here = campaign_environment(contract)
    jax = Environment(gpu_sku=here.gpu_sku, framework="jax", model_family="toy")
    store.add_effects([
        _eff(here, "speed", "4", 1.2, "a"),     # the toy's own knob (not in the catalog): filed under its name
        _eff(here, "speed", "9", 2.0, "b"),     # no such value in the knob table
        _eff(here, "accum", "1", 0.1, "c"),     # a derived knob: never searched
        _eff(jax, "chunk", "2", 0.3, "d"),      # another framework: incompatible
    ])
    engine = CampaignEngine(store, settings, executor_factory(settings))
    snap = engine._experience_snapshot(c, contract)
    priors = [r for r in snap["experience"] if "prior_sd" in r]
    # an uncatalogued mechanism is balance: covered only when the parameter count is known too (the toy's is not)
    assert [(r["knob"], r["value"], r["coverage"]) for r in priors] == [("speed", 4, "partial")]
    assert 0 < priors[0]["log_speedup"] <= 1.2 and priors[0]["prior_sd"] < 0.10  # pulled towards the record
    assert snap["experience_coverage"] == {"knobs": ["speed"], "of": 2,
                                           "grades": {"chunk": "unobserved", "speed": "partial"}}
    assert snap["experience_environment"]["model_family"] == "toy"
