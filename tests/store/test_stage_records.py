"""Typed stage records (controller/store/stage_records.py) and migration 0008 that versions the stored rows.

The stored v0007 database holds two campaigns written by the code at revision 0007 (the toy contract on the
in-process executor): one done (scope, doctor and result with plan and promotion), one stopped in ``run``.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError

from infrarsi.controller.errors import StoreError
from infrarsi.controller.store import migrate, open_store
from infrarsi.controller.store.stage_records import (SCHEMA_VERSION, Doctor, PlanCandidate, Result, Scope,
                                                     doctor_of, doctor_or_none, result_of, scope_of, scope_or_none)

DATA = Path(__file__).parent / "data"


def _doctor(**kw) -> Doctor:
    base = dict(t0=0.08, reference_window_times=[[0.08, 0.081], [0.079, 0.08]], sigma_pair=0.005,
                big_knob_gate=0.02, promotion_margin=0.024)
    return Doctor(**{**base, **kw})


def test_records_are_frozen_refuse_unknown_fields_and_round_trip() -> None:
    scope = Scope(commit="a" * 40, patches={"p.diff": "diff"}, frozen={"x.yaml": "b" * 64})
    with pytest.raises(ValidationError):
        scope.commit = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="extra"):
        Scope(commit="a" * 40, surprise=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="extra"):
        _doctor().replace(surprise=1)  # a writer cannot add a key the readers do not know
    stored = scope.dump()
    assert stored["schema_version"] == SCHEMA_VERSION and json.loads(json.dumps(stored)) == stored
    assert Scope.load(stored) == scope
    result = Result(plan=[PlanCandidate(config={"mb": 4}, patches=["p.diff"], signature="s" * 40)])
    assert Result.load(json.loads(json.dumps(result.dump()))) == result
    assert _doctor().replace(experience=[]).experience == [] and _doctor().experience is None


def test_newer_or_malformed_stored_records_are_one_line_errors() -> None:
    stored = {**_doctor().dump(), "schema_version": SCHEMA_VERSION + 1}
    with pytest.raises(StoreError, match=r"schema_version 2, newer than the 1 this infrarsi reads: upgrade") as e:
        Doctor.load(stored)
    assert "\n" not in str(e.value)
    with pytest.raises(StoreError, match="stored doctor record is malformed at t0") as e:
        Doctor.load({"t0": "fast", "reference_window_times": [], "sigma_pair": 0, "big_knob_gate": 0,
                     "promotion_margin": 0})
    assert "\n" not in str(e.value)
    with pytest.raises(StoreError, match="malformed at surprise"):
        Scope.load({"commit": "a", "surprise": 1})


class _Camp:
    id, state = 7, "init"

    def __init__(self, scope=None, doctor=None, result=None) -> None:
        self.scope, self.doctor, self.result = scope, doctor, result


def test_accessors_parse_or_say_what_is_missing() -> None:
    empty = _Camp()
    assert scope_or_none(empty) is None and doctor_or_none(empty) is None and result_of(empty) == Result()
    with pytest.raises(StoreError, match="campaign 7 has no scope yet"):
        scope_of(empty)
    with pytest.raises(StoreError, match="campaign 7 has no doctor record yet"):
        doctor_of(empty)
    legacy_memory_row = {"commit": "c" * 40}  # no schema_version: read as version 1
    assert scope_of(_Camp(scope=legacy_memory_row)).commit == "c" * 40


def _raw(db: Path) -> dict[int, tuple]:
    con = sqlite3.connect(db)
    try:
        return {r[0]: tuple(json.loads(x) if x else None for x in r[1:])
                for r in con.execute("SELECT id, scope_json, doctor_json, result_json FROM campaigns")}
    finally:
        con.close()


def test_upgrade_from_stored_0007_versions_every_record_and_downgrade_restores_it(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    shutil.copy(DATA / "v0007.sqlite", db)
    url = f"sqlite:///{db}"
    assert migrate.current_revision(url) == "0007"
    con = sqlite3.connect(db)  # an older writer's key the version-1 record does not define
    scope1 = json.loads(con.execute("SELECT scope_json FROM campaigns WHERE id = 1").fetchone()[0])
    con.execute("UPDATE campaigns SET scope_json = ? WHERE id = 1",
                (json.dumps({**scope1, "old_key": [1, 2], "inputs": None}),))
    con.commit()
    con.close()
    before = _raw(db)

    store = open_store(url)  # embedded SQLite upgrades itself
    assert migrate.current_revision(url) == migrate.head_revision()
    done, running = store.get_campaign(1), store.get_campaign(2)
    scope, doctor, result = scope_of(done), doctor_of(done), result_of(done)
    assert scope.commit == before[1][0]["commit"] and scope.frozen == before[1][0]["frozen"]
    assert scope.inputs == [] and scope.legacy == {"old_key": [1, 2]}  # nothing recorded is lost
    assert doctor.t0 == before[1][1]["t0"] and doctor.sigma_pair == before[1][1]["sigma_pair"]
    assert doctor.experience_coverage == before[1][1]["experience_coverage"]
    assert result.plan is not None and [p.signature for p in result.plan] == [p["signature"]
                                                                          for p in before[1][2]["plan"]]
    assert result.promotion == before[1][2]["promotion"] and done.delivered_speedup > 1
    assert result_of(running) == Result() and doctor_of(running).experience == before[2][1]["experience"]
    for rec in (done.scope, done.doctor, done.result, running.scope, running.doctor):
        assert rec["schema_version"] == SCHEMA_VERSION

    migrate.downgrade(url, "0007")
    after = _raw(db)
    assert after[2] == before[2]
    assert after[1][1:] == before[1][1:]  # the old null inputs became the default: absent
    assert after[1][0] == {k: v for k, v in before[1][0].items() if k != "inputs"}  # old_key back at the top
