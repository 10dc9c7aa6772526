"""The proposer ledger (migration 0006) on every store backend, its finance views, row-level security and the
upgrade of a stored database."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from infrarsi.controller.store import migrate, open_store
from infrarsi.controller.store.base import Store

DATA = Path(__file__).parent / "data"


def _campaign(store: Store, name: str = "c1"):
    return store.create_campaign(name=name, owner="alice", contract_path="/c/infrarsi.yaml", contract_yaml="name: x",
                                 contract_digest="d" * 64, repo_path="/r", workdir="/w", executor="local",
                                 partition="gpu", budget_gpu_hours=10.0, budget_trials=20, seed=3)


def _row(**over):
    row = dict(stage="run", proposer="gpt", kind="llm", request="patches", model="gpt-x", tokens_in=1200,
               tokens_out=300, usd=0.0048, wall_s=2.5, outcome="ok", reason="", prompt_digest="a" * 64,
               n_priors=0, n_patches=2)
    row.update(over)
    return row


def test_rows_round_trip_and_book_tokens(store: Store) -> None:
    c = _campaign(store)
    other = _campaign(store, "c2")
    a = store.add_proposer_request(c.id, **_row())
    b = store.add_proposer_request(c.id, **_row(proposer="claude", kind="agent", model="claude", tokens_in=0,
                                                tokens_out=0, usd=None, outcome="failed",
                                                reason="agent exited 1: boom\nsecond line", n_patches=0))
    store.add_proposer_request(other.id, **_row(stage="doctor", request="priors", n_priors=5, n_patches=0))
    rows = store.proposer_requests(c.id)
    assert [r.id for r in rows] == [a.id, b.id]
    assert rows[0].tokens_in == 1200 and rows[0].usd == pytest.approx(0.0048) and rows[0].n_patches == 2
    assert rows[1].outcome == "failed" and rows[1].reason == "agent exited 1: boom" and rows[1].usd is None
    assert rows[0].created_at is not None and rows[0].prompt_digest == "a" * 64
    # tokens also land in the cost ledger (one row per request that spent any), at the request's stage
    by_stage = {(r["stage"], r["failure_class"]): r["llm_tokens"] for r in store.cost_by_stage(c.id)}
    assert by_stage == {("run", None): 1500}


def test_finance_views_put_llm_cost_next_to_gpu_hours(store: Store) -> None:
    c = _campaign(store)
    store.add_proposer_request(c.id, **_row())
    store.add_proposer_request(c.id, **_row(outcome="failed", reason="HTTP 500", tokens_in=0, tokens_out=0,
                                            usd=None, n_patches=0, wall_s=1.5))
    store.add_proposer_request(c.id, **_row(proposer="catalog", kind="catalog", model="-", tokens_in=0,
                                            tokens_out=0, usd=None, request="priors", n_priors=4, n_patches=0,
                                            wall_s=0.0))
    (llm,) = [r for r in store.finops("llm_cost") if r["campaign_id"] == c.id]
    assert llm["llm_requests"] == 3 and llm["llm_failed_requests"] == 1
    assert llm["llm_tokens_in"] == 1200 and llm["llm_tokens_out"] == 300
    assert llm["llm_usd"] == pytest.approx(0.0048) and llm["gpu_hours"] == pytest.approx(0.0)
    assert llm["proposer_wall_hours"] == pytest.approx(4.0 / 3600)
    per = {r["proposer"]: r for r in store.finops("proposer_cost") if r["campaign_id"] == c.id}
    assert set(per) == {"gpt", "catalog"}
    assert per["gpt"]["requests"] == 2 and per["gpt"]["failed_requests"] == 1 and per["gpt"]["patches"] == 2
    assert per["catalog"]["priors"] == 4 and per["catalog"]["usd"] is None
    (cost,) = [r for r in store.finops("campaign_cost") if r["campaign_id"] == c.id]
    assert cost["llm_tokens"] == 1500


@pytest.mark.parametrize("bad, match", [
    ({"outcome": "maybe"}, "outcome must be ok or failed"),
    ({"tokens_in": -1}, "tokens_in must be a non-negative integer"),
    ({"usd": float("nan")}, "usd must be a finite number"),
    ({"wall_s": -2.0}, "wall_s must be a finite number"),
])
def test_bad_rows_are_refused_and_nothing_is_recorded(store: Store, bad: dict, match: str) -> None:
    c = _campaign(store)
    store.add_proposer_request(c.id, **_row())
    with pytest.raises(ValueError, match=match):
        store.add_proposer_request(c.id, **_row(**bad))
    assert len(store.proposer_requests(c.id)) == 1
    with pytest.raises(KeyError, match="no campaign 999"):
        store.add_proposer_request(999, **_row())


def test_a_row_and_the_scope_it_brings_are_one_transaction(store: Store) -> None:
    """The campaign records a paid answer and the patches it brought together: both or neither."""
    c = _campaign(store)
    store.update_campaign(c.id, scope={"patches": {"old": "diff"}})
    row = store.add_proposer_request(c.id, scope={"patches": {"old": "diff", "gpt-1": "diff2"}}, **_row())
    assert store.get_campaign(c.id).scope == {"patches": {"old": "diff", "gpt-1": "diff2"}}
    assert [r.id for r in store.proposer_requests(c.id)] == [row.id]
    with pytest.raises(ValueError, match="outcome must be ok or failed"):
        store.add_proposer_request(c.id, scope={"patches": {}}, **_row(outcome="maybe"))
    assert store.get_campaign(c.id).scope == {"patches": {"old": "diff", "gpt-1": "diff2"}}  # untouched
    assert len(store.proposer_requests(c.id)) == 1


def test_upgrade_from_stored_0004_keeps_rows_and_adds_the_ledger(tmp_path: Path) -> None:
    """The newest stored database (v0004) upgrades to head with its rows intact and a working ledger; a downgrade
    to 0005 removes the ledger and keeps the rest."""
    db = tmp_path / "old4.sqlite"
    shutil.copy(DATA / "v0004.sqlite", db)
    url = f"sqlite:///{db}"
    assert migrate.current_revision(url) == "0004"
    eng = create_engine(url)
    with eng.connect() as conn:
        old_campaigns = conn.exec_driver_sql("SELECT id, name FROM campaigns ORDER BY id").all()
        old_costs = conn.exec_driver_sql("SELECT COUNT(*) FROM cost_ledger").scalar()
    eng.dispose()
    assert old_campaigns
    store = open_store(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    assert [(c.id, c.name) for c in sorted(store.list_campaigns(), key=lambda c: c.id)] == \
        [tuple(r) for r in old_campaigns]
    cid = old_campaigns[0][0]
    assert store.proposer_requests(cid) == []
    store.add_proposer_request(cid, **_row())
    (llm,) = [r for r in store.finops("llm_cost") if r["campaign_id"] == cid]
    assert llm["llm_requests"] == 1 and llm["gpu_hours"] > 0  # the stored GPU-hours sit next to the LLM cost
    migrate.downgrade(url, "0005")
    insp = inspect(create_engine(url))
    assert "proposer_requests" not in insp.get_table_names()
    assert "finops_llm_cost" not in insp.get_view_names()
    eng = create_engine(url)
    with eng.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM cost_ledger").scalar() == old_costs + 1
    eng.dispose()


@pytest.mark.postgres
def test_ledger_rows_follow_campaign_visibility(pg_url: str) -> None:
    """Row-level security as cost_ledger: a researcher reads the ledger of own campaigns only and writes none;
    the daemon writes; finance reads the LLM cost views."""
    if shutil.which("psql") is None:
        pytest.skip("psql not installed")
    from tests.store.test_roles import CAMPAIGN, drop_roles, make_roles_db
    from infrarsi.controller.store.sql import PermissionDeniedError

    db = make_roles_db(pg_url, prefix="irsl")
    try:
        alice, bob, daemon = db.store("alice"), db.store("bob"), db.store("daemon")
        mine = alice.create_campaign(**CAMPAIGN)
        theirs = bob.create_campaign(**CAMPAIGN)
        daemon.add_proposer_request(mine.id, **_row())
        daemon.add_proposer_request(theirs.id, **_row(proposer="other"))
        assert [r.proposer for r in alice.proposer_requests(mine.id)] == ["gpt"]
        assert alice.proposer_requests(theirs.id) == []
        with pytest.raises(PermissionDeniedError):
            alice.add_proposer_request(mine.id, **_row())
        out = db.psql("fin", "SELECT campaign_id, llm_requests FROM finops_llm_cost ORDER BY campaign_id")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [f"{mine.id}|1", f"{theirs.id}|1"]
        out = db.psql("fin", "SELECT COUNT(*) FROM proposer_requests")
        assert out.returncode != 0 and "permission denied" in out.stderr
    finally:
        drop_roles(db)
