"""The mechanism catalog and the normalizer (issue 13, item 2)."""

from __future__ import annotations

import pytest

from infrarsi.controller.experience.mechanisms import (CATALOG, CLASSES, canonical_value, mechanism_class,
                                                      normalize, resolve, value_key)
from infrarsi.controller.experience.records import Effect, Environment, tier_rank
from infrarsi.controller.experience.retrieval import target_knobs
from infrarsi.controller.search.landscape import load_landscape
from tests.experience.transfer_pairs import LANDS

REQUIRED_KERNEL = ["low_precision_gemm", "mixed_precision", "graph_compile", "attention_kernel", "optimizer_fusion",
                   "activation_checkpointing", "micro_batch", "grad_accum"]
REQUIRED_BALANCE = ["tensor_parallel", "pipeline_parallel", "grad_bucket", "comm_overlap", "zero_stage"]


def test_catalog_size_and_required_names() -> None:
    assert len(CATALOG) >= 40
    for n in REQUIRED_KERNEL:
        assert CATALOG[n].klass == "kernel", n
    for n in REQUIRED_BALANCE:
        assert CATALOG[n].klass == "balance", n
    for m in CATALOG.values():
        assert m.klass in CLASSES and m.description
        assert m.prior_spread is None or m.prior_spread > 0
        assert m.prior_log_speedup is None or abs(m.prior_log_speedup) < 0.5, m.name  # honest: small


def test_aliases_resolve_and_are_unique() -> None:
    seen: dict[str, str] = {}
    for m in CATALOG.values():
        for a in m.aliases:
            assert a not in seen, f"{a} in {seen.get(a)} and {m.name}"
            seen[a] = m.name
    for a in ("compile", "torch_compile", "use_compile", "TORCH-COMPILE"):
        assert resolve(a) == "graph_compile"
    assert resolve("--use-flash-attn") == "attention_kernel"
    assert resolve("optimizer.fused_adam") == "optimizer_fusion"
    assert resolve("no_such_thing") is None


def test_unknown_mechanism_is_balance() -> None:
    assert mechanism_class("graph_compile") == "kernel"
    assert mechanism_class("compile") == "kernel"
    assert mechanism_class("quantum_flux") == "balance"
    assert mechanism_class(None) == "balance"


@pytest.mark.parametrize("knob,field,value,cmap,expected", [
    ("compile", "compile", 1, None, ("graph_compile", "on")),
    ("use_compile", None, True, None, ("graph_compile", "on")),
    ("torch_compile", "graph_compile", "false", None, ("graph_compile", "off")),
    ("dtype", "mixed_precision", "amp-bf16", None, ("mixed_precision", "bf16")),
    ("precision", None, "bfloat16", None, ("mixed_precision", "bf16")),
    ("attn", "attention_kernel", "fa", {"fa": "flash"}, ("attention_kernel", "flash")),
    ("attn", "attention_kernel", "flash_attention_2", None, ("attention_kernel", "flash")),
    ("mbs", None, 4, None, ("micro_batch", "4")),
    ("micro", "micro_batch", 4.0, None, ("micro_batch", "4")),
    ("nccl_algo", "collectives", "ring", None, ("nccl_algo", "ring")),          # phase name: falls back to knob
    ("overlap_grad_reduce", "collectives", True, None, ("comm_overlap", "on")),
    ("widget", "my_widget", 3, None, ("my_widget", "3")),                       # uncatalogued: kept, balance
    ("widget", None, 3, None, (None, "3")),                                     # nothing matches
    ("zero", None, "full_shard", None, ("zero_stage", "3")),
    ("flag", "graph_compile", 7, {"7": "1"}, ("graph_compile", "on")),           # knob map, then on/off
])
def test_normalize(knob, field, value, cmap, expected) -> None:
    assert normalize(knob, field, value, cmap) == expected


def test_selective_checkpointing_is_its_own_canonical_value() -> None:
    """Selective recompute is neither full checkpointing nor none: a three-state knob keeps three canonical values,
    so a record of its selective setting is not filed under the reference's ``on`` (it was, through a catalog
    alias, until session 33)."""
    values = {v: canonical_value("activation_checkpointing", v) for v in ("full", "selective", "none", "block")}
    assert values == {"full": "on", "selective": "selective", "none": "off", "block": "on"}
    cmap = {"full": "on", "selective": "selective", "none": "off"}
    assert [canonical_value("activation_checkpointing", v, cmap) for v in ("full", "selective", "none")] == \
        ["on", "selective", "off"]
    # between none and full on the catalog's scale, so the catalog proposer gives it half the mechanism's prior
    assert CATALOG["activation_checkpointing"].canonical_values == ("off", "selective", "on")
    # still a switch: true and false spell on and off
    assert normalize("gradient_checkpointing", None, True) == ("activation_checkpointing", "on")
    assert normalize("gradient_checkpointing", None, "false") == ("activation_checkpointing", "off")


def test_no_shipped_knob_files_two_values_under_one_canonical_value() -> None:
    """Records are keyed by (mechanism, canonical value): two values of one knob that normalize alike would share
    their records and could not be told apart.  Every knob of every shipped landscape keeps them apart."""
    lands = sorted(LANDS.glob("*.py"))
    assert lands
    for path in lands:
        for k in target_knobs(load_landscape(path).module.KNOBS):
            canon = [k.canonical_of(v) for v in k.values]
            assert len(set(canon)) == len(canon), (path.name, k.name, canon)


def test_two_spellings_meet() -> None:
    a = normalize("compile", "compile", 1)
    b = normalize("use_torch_compile", "graph_compile", "yes")
    c = normalize("jit_mode", "graph_compile", "max-autotune")
    assert a == b == c == ("graph_compile", "on")
    assert canonical_value(None, True) == value_key(True) == "true"


def test_environment_digest_stable_and_sensitive() -> None:
    e1 = Environment(gpu_sku="H20", nodes=1, software={"torch": "2.5", "cuda": "12.4"})
    e2 = Environment(gpu_sku="H20", nodes=1, software={"cuda": "12.4", "torch": "2.5"})
    e3 = Environment(gpu_sku="H100", nodes=1, software={"cuda": "12.4", "torch": "2.5"})
    assert e1.digest() == e2.digest() != e3.digest()
    assert Environment.from_dict(e1.to_dict()) == e1
    with pytest.raises(ValueError, match="unknown field"):
        Environment.from_dict({"gpu_sku": "x", "colour": "red"})
    eff = Effect(environment=e1.digest(), mechanism="graph_compile", value="on", klass="kernel", log_speedup=0.1,
                 noise_floor=0.03, conditioning={}, tier="verified-search", campaign="c1", trial="t1")
    assert eff.key == ("c1", "t1", "graph_compile", "on")
    assert tier_rank("verified-rerun") > tier_rank("verified-search") > tier_rank("legacy") > tier_rank("x")


def test_docs_list_every_mechanism_with_its_class() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "experience.md").read_text()
    for m in CATALOG.values():
        assert f"| `{m.name}` | {m.klass} |" in text, m.name
