"""The experience protocol in the store (issue 13): get-or-create environments, idempotent observations and
effects, filters, prune; on memory, SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from infrarsi.controller.experience.records import Effect, Environment, Observation
from infrarsi.controller.store.base import Store

H20 = Environment(gpu_sku="H20", gpu_mem_gib=96, gpus_per_node=8, nodes=1, interconnect="nvlink",
                  software={"torch": "2.5"}, framework="torch", model_family="gpt", params=7e9, seq_len=4096,
                  parallel="tp1-pp1-dp8", reference_state={"low_precision_gemm": "off"})
H100 = Environment(gpu_sku="H100", framework="torch", model_family="gpt")


def _eff(env: Environment, mech: str, value: str, ls: float, campaign: str = "c#1", trial: str = "t1",
         **kw) -> Effect:
    return Effect(environment=env.digest(), mechanism=mech, value=value, klass="kernel", log_speedup=ls,
                  noise_floor=0.02, conditioning={}, tier="verified-search", campaign=campaign, trial=trial, env=env,
                  **kw)


def test_environment_get_or_create(store: Store) -> None:
    d1 = store.add_environment(H20)
    d2 = store.add_environment(Environment.from_dict(H20.to_dict()))
    assert d1 == d2 == H20.digest()
    store.add_environment(H100)
    envs = store.environments()
    assert list(envs) == [H20.digest(), H100.digest()] and envs[d1] == H20
    assert list(store.environments([H100.digest(), "nope"])) == [H100.digest()]


def test_effects_idempotent_and_filtered(store: Store) -> None:
    batch = [_eff(H20, "low_precision_gemm", "on", 0.2, trial="t1"),
             _eff(H20, "graph_compile", "on", 0.1, trial="t2", knob="compile", raw_value="1", mem_delta_gib=0.5),
             _eff(H100, "low_precision_gemm", "on", -0.15, campaign="c#2", trial="t9")]
    assert store.add_effects(batch) == 3
    assert store.add_effects(batch) == 0          # a re-run writes nothing
    assert store.add_effects(batch[:1] + [_eff(H20, "graph_compile", "off", -0.1, trial="t2")]) == 1
    all_ = store.effects()
    assert len(all_) == 4 and all_[0].env == H20 and all_[1].knob == "compile" and all_[1].mem_delta_gib == 0.5
    assert [e.log_speedup for e in store.effects(mechanisms=["low_precision_gemm"])] == [0.2, -0.15]
    assert [e.env.gpu_sku for e in store.effects(gpu_sku="H100")] == ["H100"]
    assert len(store.effects(framework="torch", model_family="gpt")) == 4
    assert store.effects(framework="jax") == []
    assert [e.trial for e in store.effects(campaign="c#2")] == ["t9"]
    assert store.effects(tiers=["verified-rerun"]) == []


def test_effect_with_unknown_environment_is_refused_whole(store: Store) -> None:
    ghost = Environment(gpu_sku="ghost")
    bad = Effect(environment=ghost.digest(), mechanism="x", value="1", klass="balance", log_speedup=0.1,
                 noise_floor=None, conditioning={}, tier="verified-search", campaign="c", trial="t")
    with pytest.raises(ValueError, match="unknown environment digest"):
        store.add_effects([_eff(H20, "graph_compile", "on", 0.1), bad])
    assert store.effects() == []  # all or nothing


def test_observations_idempotent(store: Store) -> None:
    d = store.add_environment(H20)
    o = Observation(environment=d, campaign="c#1", trial="t1", config={"fp8": True}, canonical={"low_precision_gemm": "on"},
                    patches=("p1",), step_time_s=0.5, peak_mem_gib=40.0, verdicts={"L1": "pass"},
                    conflicts=((("micro_batch", "64"), ("activation_checkpointing", "off")),))
    assert store.add_observations([o, o]) == 1
    assert store.add_observations([o]) == 0
    (got,) = store.experience_observations(campaign="c#1")
    assert got.conflicts == o.conflicts and got.patches == ("p1",) and got.config == {"fp8": True}
    assert store.experience_observations(environment="x") == []


def test_prune_by_sku_campaign_and_age(store: Store) -> None:
    old = datetime(2020, 1, 1, tzinfo=timezone.utc)
    store.add_effects([_eff(H20, "a", "1", 0.1, trial="t1", created_at=old),
                       _eff(H20, "b", "1", 0.1, trial="t2"),
                       _eff(H100, "a", "1", 0.1, campaign="c#2", trial="t3")])
    with pytest.raises(ValueError, match="at least one"):
        store.prune_experience()
    assert store.prune_experience(before=datetime.now(timezone.utc) - timedelta(days=365))["effects"] == 1
    assert [e.trial for e in store.effects()] == ["t2", "t3"]
    assert store.prune_experience(gpu_sku="H100") == {"effects": 1, "observations": 0, "environments": 1}
    assert list(store.environments()) == [H20.digest()]
    assert store.prune_experience(campaign="c#1")["effects"] == 1
    assert store.effects() == [] and store.environments() == {}
