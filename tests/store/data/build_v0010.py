"""How tests/store/data/v0010.sqlite was made, and the same bank on any database (PostgreSQL in the tests).

A bank at revision 0010 written with the catalog alias that filed selective activation checkpointing as ``on``:

- environment H100 (reference full recompute): campaign 'olmo-h100#3' with its reference run, a selective run
  and its effect, a selective + compile crash with a conflict tuple and a requirement, no recompute and its
  effect, and compile beside full recompute with an effect conditioned on it;
- environment A100 (reference selective, so its reference state says ``on`` too): campaign 'mega-a100#4' with its
  reference run and a full-recompute run with its effect;
- the same A100 environment as the fixed catalog writes it (reference state ``selective``): campaign
  'mega-a100#9' with its reference run and a compile run with its effect.

``python tests/store/data/build_v0010.py PATH`` writes a new SQLite file; :func:`build` fills any empty database.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

import sqlalchemy as sa

from infrarsi.controller.experience.records import Environment
from infrarsi.controller.store import migrate

AC, GC = "activation_checkpointing", "graph_compile"
_COMMON = dict(gpus_per_node=8, nodes=1, interconnect="nvlink", software={"torch": "2.5"}, framework="torch",
               params=13e9, seq_len=4096, parallel="fsdp8", gpu_mem_gib=80.0, model_family="olmo")
ENVS = {"A": Environment(gpu_sku="H100", reference_state={AC: "on", GC: "off"}, **_COMMON),
        "B": Environment(gpu_sku="A100", reference_state={AC: "on", GC: "off"}, **_COMMON),
        "C": Environment(gpu_sku="A100", reference_state={AC: "selective", GC: "off"}, **_COMMON)}
_WHEN = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)


def build(url: str) -> None:
    """Migrate ``url`` (empty) to 0010 and write the bank described in the module docstring."""
    migrate.upgrade(url, "0010")
    with sa.create_engine(url).begin() as c:
        ids = {}
        for name, env in ENVS.items():
            d = env.to_dict()
            c.execute(sa.text(
                "INSERT INTO exp_environments (digest, gpu_sku, gpu_mem_gib, peak_tflops, bandwidth_gbs, gpus_per_node, "
                "nodes, interconnect, software, framework, model_family, params, seq_len, parallel, reference_state, "
                "created_at) VALUES (:digest, :gpu_sku, :gpu_mem_gib, :peak_tflops, :bandwidth_gbs, :gpus_per_node, "
                ":nodes, :interconnect, :software, :framework, :model_family, :params, :seq_len, :parallel, "
                ":reference_state, :t)"),
                {**d, "digest": env.digest(), "software": json.dumps(d["software"]),
                 "reference_state": json.dumps(d["reference_state"]), "t": _WHEN})
            ids[name] = c.execute(sa.text("SELECT id FROM exp_environments WHERE digest = :d"),
                                  {"d": env.digest()}).scalar_one()

        def obs(env: str, camp: str, trial: str, config: dict, canonical: dict, step: float | None = None,
                conflicts: list = (), requirements: list = (), outcome: str = "ok") -> None:
            c.execute(sa.text(
                "INSERT INTO exp_observations (environment_id, campaign, trial, config, canonical, patches, "
                "step_time_s, peak_mem_gib, verdicts, conflicts, requirements, created_at) VALUES (:e, :camp, :trial, "
                ":config, :canonical, '[]', :step, NULL, :verdicts, :conf, :req, :t)"),
                {"e": ids[env], "camp": camp, "trial": trial, "config": json.dumps(config),
                 "canonical": json.dumps(canonical), "step": step, "verdicts": json.dumps({"outcome": outcome}),
                 "conf": json.dumps([[list(p) for p in t] for t in conflicts]),
                 "req": json.dumps([[list(s), list(r)] for s, r in requirements]), "t": _WHEN})

        def eff(env: str, camp: str, trial: str, mech: str, value: str, knob: str, raw: str, log: float,
                cond: dict | None = None) -> None:
            c.execute(sa.text(
                "INSERT INTO exp_effects (environment_id, campaign, trial, mechanism, value, klass, log_speedup, "
                "noise_floor, conditioning, tier, knob, raw_value, mem_delta_gib, created_at) VALUES (:e, :camp, "
                ":trial, :m, :v, 'kernel', :log, 0.02, :cond, 'verified-rerun', :knob, :raw, NULL, :t)"),
                {"e": ids[env], "camp": camp, "trial": trial, "m": mech, "v": value, "log": log,
                 "cond": json.dumps(cond or {}), "knob": knob, "raw": raw, "t": _WHEN})

        obs("A", "olmo-h100#3", "reference", {"recompute": "full", "compile": False}, {AC: "on", GC: "off"}, 5.0)
        obs("A", "olmo-h100#3", "s1", {"recompute": "Selective", "compile": False}, {AC: "on", GC: "off"}, 4.7)
        obs("A", "olmo-h100#3", "s2", {"recompute": "selective", "compile": True}, {AC: "on", GC: "on"},
            conflicts=[((AC, "on"), (GC, "on"))], requirements=[((GC, "on"), (AC, "on"))], outcome="crash")
        obs("A", "olmo-h100#3", "s3", {"recompute": "none", "compile": False}, {AC: "off", GC: "off"}, 4.6)
        obs("A", "olmo-h100#3", "s4", {"recompute": "full", "compile": True}, {AC: "on", GC: "on"}, 4.8)
        eff("A", "olmo-h100#3", "s1", AC, "on", "recompute", "Selective", 0.062)
        eff("A", "olmo-h100#3", "s3", AC, "off", "recompute", "none", 0.083)
        eff("A", "olmo-h100#3", "s4", GC, "on", "compile", "true", 0.041, cond={AC: "on"})
        obs("B", "mega-a100#4", "reference", {"recompute_granularity": "selective", "compile": False},
            {AC: "on", GC: "off"}, 6.0)
        obs("B", "mega-a100#4", "s1", {"recompute_granularity": "full", "compile": False}, {AC: "on", GC: "off"}, 6.3)
        eff("B", "mega-a100#4", "s1", AC, "on", "recompute_granularity", "full", -0.049)
        obs("C", "mega-a100#9", "reference", {"recompute_granularity": "selective", "compile": False},
            {AC: "selective", GC: "off"}, 6.1)
        obs("C", "mega-a100#9", "s1", {"recompute_granularity": "selective", "compile": True},
            {AC: "selective", GC: "on"}, 5.7)
        eff("C", "mega-a100#9", "s1", GC, "on", "compile", "true", 0.068)


if __name__ == "__main__":
    build(f"sqlite:///{sys.argv[1]}")
