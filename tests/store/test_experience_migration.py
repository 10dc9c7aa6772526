"""Revision 0005 from a database stored at 0004 (tests/store/data/v0004.sqlite: campaigns 1 'old' and 2
'nanogpt-cpu' with the nanogpt example contract, trials, seven experience rows of which six are verified with a
log-speedup): the legacy rows survive as effects, the old table stays, the downgrade drops only the new tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from infrarsi.controller.store import migrate, open_store

DATA = Path(__file__).parent / "data"


def test_upgrade_from_stored_0004_migrates_experience(tmp_path: Path) -> None:
    db = tmp_path / "old4.sqlite"
    shutil.copy(DATA / "v0004.sqlite", db)
    url = f"sqlite:///{db}"
    assert migrate.current_revision(url) == "0004"
    store = open_store(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    c = store.get_campaign(2)
    assert (c.name, c.owner, c.delivered_speedup) == ("nanogpt-cpu", "alice", 2.5)
    assert [t.trial_key for t in store.list_trials(2)] == ["k21", "k22", "k23", "k24"]
    got = {(e.knob, e.raw_value): e for e in store.effects()}
    assert len(got) == 6  # the unverified tf32 row stays only in the legacy table
    dtype = got[("dtype", "bf16")]
    assert (dtype.mechanism, dtype.value, dtype.klass, dtype.tier) == ("mixed_precision", "bf16", "kernel", "legacy")
    assert dtype.log_speedup == pytest.approx(0.41) and dtype.noise_floor == pytest.approx(0.04)
    assert dtype.mem_delta_gib == pytest.approx(-0.2) and dtype.campaign == "nanogpt-cpu#2"
    assert dtype.env.gpu_sku == "cpu" and dtype.env.model_family == "nanogpt-cpu" and dtype.env.framework == "torch"
    assert (got[("attention", "sdpa")].mechanism, got[("attention", "sdpa")].value) == ("attention_kernel", "sdpa")
    assert got[("optimizer_impl", "fused")].mechanism == "optimizer_fusion"
    compile_ = got[("use_compile", "True")]  # campaign 1's contract is not parseable: the knob name decides
    assert (compile_.mechanism, compile_.value, compile_.campaign, compile_.noise_floor) == ("graph_compile", "on",
                                                                                            "old#1", None)
    bucket = got[("bucket_cap_mb", "50")]
    assert (bucket.mechanism, bucket.klass, bucket.campaign, bucket.env.gpu_sku) == ("grad_bucket", "balance",
                                                                                   "legacy", "A100")
    assert (got[("mystery_flag", "x")].mechanism, got[("mystery_flag", "x")].klass) == ("mystery_flag", "balance")
    assert len(store.environments()) == 3
    assert len(store.effects(campaign_id=2)) == 3
    assert len(store.experience()) == 7  # nothing lost: the old table is kept
    # the idempotency key holds for migrated rows too
    assert store.add_effects(store.effects()) == 0
    migrate.downgrade(url, "0004")
    insp = inspect(create_engine(url))
    assert not {"exp_effects", "exp_observations", "exp_environments"} & set(insp.get_table_names())
    with create_engine(url).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM experience")).scalar() == 7


def test_upgrade_from_stored_0008_adds_observation_requirements(tmp_path: Path) -> None:
    """Revision 0009 from tests/store/data/v0008.sqlite (one H100 environment, three observations of campaign
    'gpt13b#7': the reference, a crash with a conflict tuple, a passing run; one effect): every row survives, old
    observations read with no requirements and their conflicts intact, new ones store requirements, and the
    downgrade drops only the column."""
    from infrarsi.controller.experience.records import Observation

    db = tmp_path / "old8.sqlite"
    shutil.copy(DATA / "v0008.sqlite", db)
    url = f"sqlite:///{db}"
    assert migrate.current_revision(url) == "0008"
    store = open_store(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    obs = {o.trial: o for o in store.experience_observations()}
    assert sorted(obs) == ["reference", "t003", "t004"]
    assert all(o.requirements == () for o in obs.values())
    assert obs["t003"].conflicts == ((("comm_overlap", "on"), ("low_precision_gemm", "on")),)
    assert obs["t004"].step_time_s == pytest.approx(3.5)
    (eff,) = store.effects()
    assert (eff.mechanism, eff.value, eff.log_speedup) == ("comm_overlap", "on", pytest.approx(0.13))
    need = ((("comm_overlap", "on"), ("distributed_optimizer", "on")),)
    new = Observation(environment=obs["t003"].environment, campaign="gpt13b#8", trial="t001",
                      config={"overlap_param_gather": True}, canonical={"comm_overlap": "on"},
                      verdicts={"outcome": "crash"}, requirements=need)
    assert store.add_observations([new]) == 1
    assert store.add_observations([new]) == 0  # idempotent on (campaign, trial)
    got = {o.trial: o for o in store.experience_observations() if o.campaign == "gpt13b#8"}
    assert got["t001"].requirements == need
    migrate.downgrade(url, "0008")
    cols = {c["name"] for c in inspect(create_engine(url)).get_columns("exp_observations")}
    assert "requirements" not in cols and "conflicts" in cols
    with create_engine(url).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM exp_observations")).scalar() == 4


def test_upgrade_from_stored_0010_rekeys_selective_checkpointing(any_url: str) -> None:
    """Revision 0011 from tests/store/data/v0010.sqlite (on PostgreSQL: the same bank written at 0010 by
    tests/store/data/build_v0010.py, which made the file), a bank written with the old catalog alias that filed
    selective checkpointing under full recompute's ``on``: campaign 'olmo-h100#3' (H100, reference full; a
    selective run, a selective crash with a conflict and a requirement, an effect of compile measured beside
    selective), 'mega-a100#4' (A100, reference selective, so its environment's reference state was wrong too) and
    'mega-a100#9' (the same A100 environment as the fixed catalog writes it).  Every selective record moves to
    ``selective``, full recompute stays ``on``, the two A100 environments become one, nothing else changes, and
    the downgrade files them back."""
    url = any_url
    if url.startswith("sqlite"):
        shutil.copy(DATA / "v0010.sqlite", url.removeprefix("sqlite:///"))
    else:
        from tests.store.data.build_v0010 import build

        build(url)
    assert migrate.current_revision(url) == "0010"
    migrate.upgrade(url)  # what `infrarsi db upgrade` runs (a SQLite store would also upgrade itself on open)
    store = open_store(url)
    assert migrate.current_revision(url) == migrate.head_revision()
    AC = "activation_checkpointing"
    obs = {(o.campaign, o.trial): o for o in store.experience_observations()}
    assert len(obs) == 9
    assert obs[("olmo-h100#3", "s1")].canonical[AC] == "selective"
    assert obs[("olmo-h100#3", "reference")].canonical[AC] == "on"  # full recompute is still on
    assert obs[("olmo-h100#3", "s4")].canonical[AC] == "on"
    assert obs[("olmo-h100#3", "s3")].canonical[AC] == "off"
    crash = obs[("olmo-h100#3", "s2")]
    assert crash.canonical == {AC: "selective", "graph_compile": "on"}
    assert crash.conflicts == (((AC, "selective"), ("graph_compile", "on")),)
    assert crash.requirements == ((("graph_compile", "on"), (AC, "selective")),)
    eff = {(e.campaign, e.trial, e.mechanism): e for e in store.effects()}
    assert len(eff) == 5
    sel = eff[("olmo-h100#3", "s1", AC)]
    assert (sel.value, sel.raw_value, sel.log_speedup) == ("selective", "Selective", pytest.approx(0.062))
    assert eff[("olmo-h100#3", "s3", AC)].value == "off"
    assert eff[("olmo-h100#3", "s4", "graph_compile")].conditioning == {AC: "on"}  # measured beside full recompute
    assert eff[("mega-a100#4", "s1", AC)].value == "on"  # full, against a selective reference
    # the A100 reference was selective: its environment now says so, and it is the environment campaign 9 wrote
    envs = store.environments()
    assert len(envs) == 2
    a100 = [d for d, e in envs.items() if e.gpu_sku == "A100"]
    assert len(a100) == 1 and envs[a100[0]].reference_state == {AC: "selective", "graph_compile": "off"}
    assert envs[a100[0]].digest() == a100[0]
    assert obs[("mega-a100#4", "reference")].environment == a100[0] == obs[("mega-a100#9", "s1")].environment
    assert obs[("mega-a100#4", "reference")].canonical[AC] == "selective"
    assert eff[("mega-a100#4", "s1", AC)].env.reference_state[AC] == "selective"
    h100 = [e for e in envs.values() if e.gpu_sku == "H100"]
    assert h100[0].reference_state == {AC: "on", "graph_compile": "off"}
    # idempotent: the upgrade's records are what the fixed catalog writes, so re-adding them adds nothing
    assert store.add_effects(store.effects()) == 0 and store.add_observations(store.experience_observations()) == 0
    migrate.downgrade(url, "0010")
    with create_engine(url).connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM exp_observations")).scalar() == 9
        assert conn.execute(text("SELECT value FROM exp_effects WHERE raw_value = 'Selective'")).scalar() == "on"
        assert conn.execute(text("SELECT count(*) FROM exp_environments")).scalar() == 2
