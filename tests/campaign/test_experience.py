"""Experience write-back feeds the next campaign's search, frozen at doctor time."""

from __future__ import annotations

from pathlib import Path

from infrarsi.controller.campaign.engine import CampaignEngine, parse_contract_yaml
from infrarsi.controller.campaign.runner import create_campaign, executor_factory
from infrarsi.controller.settings import Settings
from infrarsi.controller.store import open_store


def test_experience_snapshot_maps_values_and_filters(tmp_path: Path, toy_repo: Path, infrarsi_home: Path) -> None:
    settings = Settings.from_env()
    store = open_store()
    store.add_experience([
        {"workload_class": "toy", "gpu": "cpu", "knob": "speed", "value": "4", "log_speedup": 1.2, "verified": True},
        {"workload_class": "toy", "gpu": "cpu", "knob": "speed", "value": "9", "log_speedup": 2.0, "verified": True},
        {"workload_class": "toy", "gpu": "cpu", "knob": "accum", "value": "1", "log_speedup": 0.1, "verified": True},
        {"workload_class": "other", "gpu": "cpu", "knob": "chunk", "value": "2", "log_speedup": 0.3, "verified": True},
        {"workload_class": "toy", "gpu": "cpu", "knob": "chunk", "value": "2", "log_speedup": 0.3, "verified": False},
    ])
    c = create_campaign(store, settings, toy_repo / "infrarsi.yaml", executor="local")
    engine = CampaignEngine(store, settings, executor_factory(settings))
    snap = engine._experience_snapshot(c, parse_contract_yaml(c.contract_yaml))
    # only verified rows of this workload class, on searched (not derived) knobs, with values from the knob table
    assert snap["experience"] == [{"knob": "speed", "value": 4, "log_speedup": 1.2}]
    assert snap["experience_coverage"] == {"knobs": ["speed"], "of": 2}
