"""The experience bank under deploy/roles.sql and migration 0005's row-level security (PostgreSQL): effects and
observations are read through their campaign (imported ones by everyone), written by the daemon, imported and
pruned by admins; researchers write nothing."""

from __future__ import annotations

from typing import Iterator

import pytest

from infrarsi.controller.experience.records import Effect, Environment
from infrarsi.controller.store.sql import PermissionDeniedError
from tests.store.test_roles import CAMPAIGN, RolesDb, drop_roles, make_roles_db

ENV = Environment(gpu_sku="H20", framework="torch", model_family="gpt")


def _eff(campaign: str, trial: str) -> Effect:
    return Effect(environment=ENV.digest(), mechanism="graph_compile", value="on", klass="kernel", log_speedup=0.1,
                  noise_floor=0.02, conditioning={}, tier="verified-search", campaign=campaign, trial=trial, env=ENV)


@pytest.fixture
def roles_db(pg_url: str) -> Iterator[RolesDb]:
    db = make_roles_db(pg_url, prefix="irsx")
    try:
        yield db
    finally:
        drop_roles(db)


@pytest.mark.postgres
def test_bank_rows_follow_their_campaign(roles_db: RolesDb) -> None:
    alice, bob, carol, daemon = (roles_db.store(p) for p in ("alice", "bob", "carol", "daemon"))
    mine = alice.create_campaign(**CAMPAIGN)
    theirs = bob.create_campaign(**CAMPAIGN)
    assert daemon.add_effects([_eff("a", "t1")], campaign_id=mine.id) == 1
    assert daemon.add_effects([_eff("b", "t1")], campaign_id=theirs.id) == 1
    assert carol.add_effects([_eff("imported", "t1")]) == 1  # an admin imports a pack
    assert sorted(e.campaign for e in alice.effects()) == ["a", "imported"]
    assert sorted(e.campaign for e in bob.effects()) == ["b", "imported"]
    assert len(carol.effects()) == 3 and len(daemon.effects()) == 3
    with pytest.raises(PermissionDeniedError):
        alice.add_effects([_eff("forged", "t1")])
    with pytest.raises(PermissionDeniedError):
        daemon.prune_experience(campaign="a")  # the daemon deletes nothing
    with pytest.raises(PermissionDeniedError):
        alice.prune_experience(campaign="a")
    assert carol.prune_experience(campaign="b")["effects"] == 1
    assert sorted(e.campaign for e in daemon.effects()) == ["a", "imported"]
    for s in (alice, bob, carol, daemon):
        s.engine.dispose()
