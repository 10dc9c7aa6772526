"""``controller/campaign/trialspec.py`` directly: trial directories, the per-trial key, the TrialSpec and the judge
spec built from the toy contract."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from infrarsi.controller.campaign.engine import parse_contract_yaml
from infrarsi.controller.campaign.trialspec import (
    DISK_LIMIT_GIB, build_spec, judge_spec_dict, scratch_dir, trial_dirs, write_key_file,
)
from infrarsi.controller.contract.launch import render_launch
from infrarsi.verifier import signing
from infrarsi.verifier.spec import JudgeSpec
from tests.campaign.helpers import TOY

MASTER = b"\x07" * 32
KEY = "0123456789abcdef0123456789abcdef"


def _contract():
    return parse_contract_yaml((TOY / "infrarsi.yaml").read_text())


def test_dirs_are_named_by_the_key_and_scratch_is_a_sibling(tmp_path: Path) -> None:
    src, out = trial_dirs(tmp_path, KEY)
    assert src == tmp_path / "trials" / KEY[:16] / "src" and out == tmp_path / "trials" / KEY[:16] / "out"
    assert scratch_dir(out) == tmp_path / "trials" / KEY[:16] / "scratch"


def test_key_file_is_private_derived_and_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = write_key_file(out, MASTER, KEY)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signing.read_key_file(str(path)) == signing.derive_trial_key(MASTER, KEY)
    assert MASTER.hex() not in path.read_text()  # the master key never reaches the trial
    path.write_text("stale")
    assert write_key_file(out, MASTER, KEY).read_text() == signing.derive_trial_key(MASTER, KEY).hex()


def test_build_spec_from_the_toy_contract(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("INFRARSI_ISOLATION", raising=False)
    contract = _contract()
    config = contract.reference_config | {"speed": 4}
    src, out = trial_dirs(tmp_path, KEY)
    src.mkdir(parents=True)
    scope = {"commit": "0" * 40, "frozen": {"infrarsi.yaml": "ab" * 32}}
    spec = build_spec(contract, scope, config, KEY, src, out, MASTER, "debug")
    assert spec.trial_id == KEY and spec.workdir == src and spec.outdir == out and spec.src_dir == src
    assert spec.argv == render_launch(contract, config).argv and "--speed=4" in spec.argv
    assert ("PYTHONUNBUFFERED", "1") in spec.env and spec.partition == "debug"
    assert spec.updates == 8 and spec.time_limit_s == 120 and spec.disk_limit_gib == DISK_LIMIT_GIB
    assert spec.memory_cap_gib == 8 and spec.isolation in ("bwrap", "none")
    assert json.loads(spec.frozen_manifest.read_text()) == scope["frozen"]  # type: ignore[union-attr]
    assert spec.key_file == out / "trial.key" and spec.scratch_dir == scratch_dir(out) and spec.scratch_dir.is_dir()
    other = build_spec(contract, scope, config, KEY, tmp_path / "elsewhere", out, MASTER, None)
    assert other.src_dir is None and other.partition == contract.launch.partition


def test_judge_spec_dict_round_trips_through_judgespec() -> None:
    contract = _contract()
    d = judge_spec_dict(contract, {"commit": "0" * 40, "frozen": {"infrarsi.yaml": "cd" * 32}})
    assert d["updates"] == 8 and d["window"] == [3, 8] and d["tokens_per_update"] == 32 and d["seq_len"] == 16
    assert d["precision_menu"] == ["fp32"] and d["memory_cap_gib"] == 8
    assert d["frozen_manifest"] == {"infrarsi.yaml": "cd" * 32}
    spec = JudgeSpec.from_dict(json.loads(json.dumps(d)))  # what re-judging reads back from the store
    assert spec.updates == 8 and tuple(spec.window) == (3, 8)
