"""Experience packs: export -> file -> validate -> records round-trip; malformed packs are refused with one line
that names the file, the path and the problem, and nothing is imported."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from infrarsi.controller.experience.pack import (PackError, build_pack, dump_pack, import_pack, read_pack, schema,
                                                 validate_pack)
from infrarsi.controller.experience.records import Effect, Environment, Observation
from infrarsi.controller.store.memory import MemoryStore

ENV = Environment(gpu_sku="H20", gpu_mem_gib=96.0, gpus_per_node=8, nodes=1, interconnect="nvlink",
                  software={"torch": "2.5"}, framework="torch", model_family="gpt", params=7e9, seq_len=4096,
                  parallel="tp1-pp1-dp8", reference_state={"low_precision_gemm": "off"})
D = ENV.digest()
OBS = Observation(environment=D, campaign="gpt#1", trial="t1", config={"fp8": True, "mbs": 2},
                  canonical={"low_precision_gemm": "on", "micro_batch": "2"}, patches=("p.diff",), step_time_s=0.8,
                  peak_mem_gib=60.0, verdicts={"outcome": "ok"},
                  conflicts=((("micro_batch", "8"), ("activation_checkpointing", "off")),))
#: a crash the failure ledger explained as "compile needs the fused optimizer" (a requirement)
CRASH = Observation(environment=D, campaign="gpt#1", trial="t2", config={"fp8": False, "compile": True},
                    canonical={"graph_compile": "on"}, verdicts={"outcome": "crash"},
                    requirements=((("graph_compile", "on"), ("optimizer_fusion", "fused")),))
EFF = Effect(environment=D, mechanism="low_precision_gemm", value="on", klass="kernel", log_speedup=0.22,
             noise_floor=0.01, conditioning={"micro_batch": "2"}, tier="verified-search", campaign="gpt#1",
             trial="t1", knob="fp8", raw_value="true", mem_delta_gib=-1.5)


def _doc() -> dict:
    return json.loads(dump_pack(build_pack({D: ENV}, [OBS, CRASH], [EFF], source="cluster-a")))


@pytest.mark.parametrize("fmt,suffix", [("json", ".json"), ("yaml", ".yaml")])
def test_round_trip_through_a_file(tmp_path: Path, fmt: str, suffix: str) -> None:
    p = tmp_path / f"pack{suffix}"
    p.write_text(dump_pack(build_pack({D: ENV}, [OBS, CRASH], [EFF], source="cluster-a"), fmt))
    envs, obs, effects = read_pack(p)
    assert envs == {D: ENV}
    assert obs == [OBS, CRASH]  # the conflict tuple and the requirement come back as they went
    (e,) = effects
    assert (e.mechanism, e.value, e.log_speedup, e.conditioning, e.env) == ("low_precision_gemm", "on", 0.22,
                                                                          {"micro_batch": "2"}, ENV)
    store = MemoryStore()
    assert import_pack(store, p) == {"environments": 1, "observations": 2, "effects": 1}
    assert import_pack(store, p) == {"environments": 1, "observations": 0, "effects": 0}  # idempotent
    assert [o.requirements for o in store.experience_observations()] == [(), CRASH.requirements]
    assert store.effects()[0].key == EFF.key


def test_schema_is_valid_and_matches_the_export() -> None:
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.validate(_doc(), schema())


def test_an_observation_without_requirements_is_written_without_the_key() -> None:
    """A pack whose observations carry no requirement reads in an infrarsi from before the field (whose schema
    refuses unknown keys)."""
    doc = _doc()
    assert "requirements" not in doc["observations"][0]
    assert doc["observations"][1]["requirements"] == [[["graph_compile", "on"], ["optimizer_fusion", "fused"]]]


def _break(edit) -> dict:
    doc = _doc()
    edit(doc)
    return doc


BAD = [
    ("wrong version", lambda d: d.update(version=2), "version 2 is not supported"),
    ("wrong format", lambda d: d.update(format="something-else"), "format: expected 'infrarsi.experience-pack'"),
    ("missing field", lambda d: d["effects"][0].pop("log_speedup"),
     "effects[0]: 'log_speedup' is a required property"),
    ("bad number", lambda d: d["effects"][0].update(log_speedup="fast"),
     "effects[0].log_speedup: 'fast' is not of type 'number'"),
    ("out of range", lambda d: d["effects"][0].update(log_speedup=50),
     "effects[0].log_speedup: 50 is greater than the maximum of 5"),
    ("unknown class", lambda d: d["effects"][0].update(klass="network"),
     "effects[0].klass: unknown mechanism class 'network'"),
    ("class contradicts catalog", lambda d: d["effects"][0].update(klass="balance"),
     "low_precision_gemm is kernel in the catalog"),
    ("unknown tier", lambda d: d["effects"][0].update(tier="rumour"), "unknown evidence tier 'rumour'"),
    ("unknown field", lambda d: d["effects"][0].update(colour="red"),
     "Additional properties are not allowed ('colour'"),
    ("digest mismatch", lambda d: d["environments"][0].update(gpu_sku="H100"),
     "environments[0].digest does not match"),
    ("dangling environment", lambda d: d["environments"].clear(), "observations[0].environment: no environment"),
    ("bad time", lambda d: d["effects"][0].update(created_at="yesterday"),
     "effects[0].created_at: 'yesterday' is not an ISO"),
    ("requirement of three settings", lambda d: d["observations"][1]["requirements"][0].append(["tf32", "on"]),
     "observations[1].requirements[0]: [['graph_compile', 'on'], ['optimizer_fusion', 'fused'], ['tf32', 'on']] "
     "is too long"),
    ("requirement value not a string", lambda d: d["observations"][1]["requirements"][0][1].__setitem__(1, 4),
     "observations[1].requirements[0][1][1]: 4 is not of type 'string'"),
    ("negative memory", lambda d: d["environments"][0].update(gpu_mem_gib=-1),
     "environments[0].gpu_mem_gib: -1 is less than"),
]


@pytest.mark.parametrize("why,edit,message", BAD, ids=[b[0] for b in BAD])
def test_malformed_pack_is_refused_with_one_line(tmp_path: Path, why: str, edit, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(_break(edit)))
    store = MemoryStore()
    with pytest.raises(PackError) as info:
        import_pack(store, p)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{p}: ") and message in text, text
    assert store.effects() == [] and store.environments() == {}  # nothing imported


@pytest.mark.parametrize("text,message", [
    ("{not json", "not valid JSON"),
    ('{"format": "infrarsi.experience-pack", "version": 1, "environments": [], "effects": [], "x": NaN}',
     "NaN is not a number a pack may hold"),
    ("- just\n- a list\n", "a pack is a mapping"),
    ("key: [unclosed", "not valid JSON or YAML"),
])
def test_unparseable_pack(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "bad.pack"
    p.write_text(text)
    with pytest.raises(PackError, match=message):
        read_pack(p)


def test_non_finite_yaml_number_refused() -> None:
    doc = _doc()
    doc["effects"][0]["noise_floor"] = float("inf")
    with pytest.raises(PackError, match=r"effects\[0\].noise_floor: inf is not a finite number"):
        validate_pack(copy.deepcopy(doc), "p")


def test_a_pack_exported_before_the_selective_fix_is_rekeyed_on_import(tmp_path: Path) -> None:
    """A pack written when the catalog filed selective checkpointing as ``on`` (raw spellings kept): importing it
    files the selective run, its effect and the crash's conflict under ``selective``, and the reference's ``on``
    (full recompute) stays; importing a pack exported after the fix changes nothing (rekey is idempotent)."""
    ac = "activation_checkpointing"
    env = Environment(gpu_sku="H100", framework="torch", model_family="olmo", reference_state={ac: "on"})
    d = env.digest()
    old = [Observation(environment=d, campaign="olmo#3", trial="ref", config={"recompute": "full"},
                       canonical={ac: "on"}, step_time_s=5.0),
           Observation(environment=d, campaign="olmo#3", trial="s1", config={"recompute": "selective"},
                       canonical={ac: "on"}, step_time_s=4.7),
           Observation(environment=d, campaign="olmo#3", trial="s2", config={"recompute": "selective", "fp8": True},
                       canonical={ac: "on", "low_precision_gemm": "on"}, verdicts={"outcome": "crash"},
                       conflicts=(((ac, "on"), ("low_precision_gemm", "on")),))]
    eff = Effect(environment=d, mechanism=ac, value="on", klass="kernel", log_speedup=0.06, noise_floor=0.02,
                 conditioning={}, tier="verified-rerun", campaign="olmo#3", trial="s1", knob="recompute",
                 raw_value="selective")
    p = tmp_path / "old.json"
    p.write_text(dump_pack(build_pack({d: env}, old, [eff], source="before")))
    store = MemoryStore()
    assert import_pack(store, p) == {"environments": 1, "observations": 3, "effects": 1}
    got = {o.trial: o for o in store.experience_observations()}
    assert [got[t].canonical[ac] for t in ("ref", "s1", "s2")] == ["on", "selective", "selective"]
    assert got["s2"].conflicts == (((ac, "selective"), ("low_precision_gemm", "on")),)
    (e,) = store.effects()
    assert (e.value, e.raw_value) == ("selective", "selective")
    again = tmp_path / "after.json"
    again.write_text(dump_pack(build_pack(store.environments(), store.experience_observations(), store.effects(),
                                          source="after")))
    assert import_pack(store, again) == {"environments": 1, "observations": 0, "effects": 0}
