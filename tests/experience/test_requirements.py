"""Requirements ("s needs r") in the experience bank: written back from the failure ledger, carried to another
campaign only when the source pinned them down, and enforced by the target's search.

The attack each check stops: a guessed requirement carried as a rule would keep a good setting away from every
run without its supposed partner on the target (negative transfer), so an ambiguous, refuted or out-of-scope one
must not be carried; a pinned one must save the target the crashes the source paid for."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.controller.experience import transfer as T
from infrarsi.controller.experience.records import Environment, Observation
from infrarsi.controller.experience.requirements import requirements
from infrarsi.controller.experience.retrieval import target_knobs
from infrarsi.controller.search.benchmark import simulate_campaign
from infrarsi.controller.search.landscape import load_landscape

LANDS = Path(__file__).resolve().parents[2] / "bench" / "landscapes"

H100 = Environment(gpu_sku="H100", gpu_mem_gib=80.0, gpus_per_node=8, nodes=2, interconnect="infiniband",
                   framework="torch", model_family="gpt", params=13e9, seq_len=4096, parallel="tp1-pp1-dp16",
                   reference_state={"graph_compile": "off", "optimizer_fusion": "loop", "tf32": "off"})
H200 = Environment(**{**H100.to_dict(), "gpu_sku": "H200", "gpu_mem_gib": 141.0})
#: the target's spelling of the three kernel knobs (renamed flags, other value spellings)
KNOBS = target_knobs([
    {"name": "torch.compile", "values": ["no", "yes"], "reference": "no", "mechanism": "graph_compile",
     "canonical": {"no": "off", "yes": "on"}},
    {"name": "optim.fused", "values": [0, 1], "reference": 0, "mechanism": "optimizer_fusion",
     "canonical": {"0": "loop", "1": "fused"}},
    {"name": "matmul.tf32", "values": [0, 1], "reference": 0, "mechanism": "tf32", "canonical": {"0": "off", "1": "on"}},
])
NEED = (("graph_compile", "on"), ("optimizer_fusion", "fused"))


def _obs(trial: str, canon: dict[str, str], ok: bool, campaign: str = "src#1", env: Environment = H100,
         needs: tuple = ()) -> Observation:
    return Observation(environment=env.digest(), campaign=campaign, trial=trial, config={}, canonical=canon,
                       step_time_s=1.0 if ok else None, verdicts={"outcome": "ok" if ok else "crash"},
                       requirements=needs)


def _pinned_source(env: Environment = H100) -> list[Observation]:
    """compile passed only beside the fused optimizer; a crash of compile with tf32 and without it, where compile,
    tf32 and compile x tf32 all passed elsewhere: nothing but the missing partner explains it."""
    on = {"graph_compile": "on"}
    return [_obs("ref", {}, True, env=env),
            _obs("t1", {**on, "optimizer_fusion": "fused"}, True, env=env),
            _obs("t2", {**on, "optimizer_fusion": "fused", "tf32": "on"}, True, env=env),
            _obs("t3", {"tf32": "on"}, True, env=env),
            _obs("t4", {**on, "tf32": "on"}, False, env=env, needs=(NEED,))]


def test_a_pinned_requirement_transfers_onto_renamed_knobs() -> None:
    got = requirements(_pinned_source(), {H100.digest(): H100}, H200, KNOBS, "filtered")
    assert got == [{"requires": [["torch.compile", "yes"], ["optim.fused", 1]]}]


def test_a_requirement_with_another_explanation_is_not_carried() -> None:
    """The same crash, but every passing tf32 run also held the fused optimizer: "tf32 needs fused" explains it
    as well, so the source's choice was a guess."""
    obs = [o for o in _pinned_source() if o.trial != "t3"]
    envs = {H100.digest(): H100}
    assert requirements(obs, envs, H200, KNOBS, "filtered") == []
    assert requirements(obs, envs, H200, KNOBS, "all") != []  # the unfiltered baseline carries every record


def test_a_crash_a_tuple_could_explain_does_not_pin_a_requirement() -> None:
    """compile x tf32 never passed: the crash may be that pair's, not the missing partner's."""
    obs = [o for o in _pinned_source() if o.trial != "t2"]
    assert requirements(obs, {H100.digest(): H100}, H200, KNOBS, "filtered") == []


def test_a_requirement_another_campaign_refutes_is_not_carried() -> None:
    refute = _obs("u1", {"graph_compile": "on"}, True, campaign="other#2")  # compile passed without fused
    assert requirements(_pinned_source() + [refute], {H100.digest(): H100}, H200, KNOBS, "filtered") == []


def test_a_requirement_from_another_framework_is_not_carried() -> None:
    jax = Environment(**{**H100.to_dict(), "framework": "jax"})
    assert requirements(_pinned_source(jax), {jax.digest(): jax}, H200, KNOBS, "filtered") == []


def test_the_targets_search_runs_the_setting_only_beside_its_partner() -> None:
    from infrarsi.controller.search.controller import SearchController
    from infrarsi.controller.search.space import Candidate

    from tests.search.conftest import make_noise

    space = load_landscape(LANDS / "heldout_gpt13b_twonode_h100.py").space
    need = {"requires": [["overlap_param_gather", True], ["use_distributed_optimizer", True]]}
    ref = space.reference().as_dict()
    alone = Candidate.from_dict({**ref, "overlap_param_gather": True})
    both = Candidate.from_dict({**ref, "overlap_param_gather": True, "use_distributed_optimizer": True})
    cold = SearchController(space, make_noise(), 1.0, 80.0, seed=0)
    assert cold.admissible(alone, set()) is None
    ctl = SearchController(space, make_noise(), 1.0, 80.0, seed=0, experience=[need])
    why = ctl.admissible(alone, set()) or ""
    assert "overlap_param_gather" in why and "needs use_distributed_optimizer" in why, why
    assert ctl.admissible(both, set()) is None
    # a probe of the setting (moves.with_setting) reads the requirement from the search's view
    assert (("overlap_param_gather", True), ("use_distributed_optimizer", True)) in ctl.view.requirements


def gpt13b_with_environment(tmp_path: Path) -> Path:
    """``heldout_gpt13b_twonode_h100`` with an ``ENVIRONMENT`` and ``mechanism`` fields, as a transfer landscape."""
    path = tmp_path / "gpt13b_env.py"
    path.write_text((LANDS / "heldout_gpt13b_twonode_h100.py").read_text() + '''
ENVIRONMENT = {"gpu_sku": "H100", "gpu_mem_gib": 80.0, "gpus_per_node": 8, "nodes": 2, "interconnect": "infiniband",
               "framework": "torch", "model_family": "gpt", "params": 13e9, "seq_len": 4096, "parallel": "tp1-pp1-dp16"}
for _k in KNOBS:
    _k["mechanism"] = {"overlap_param_gather": "param_gather_overlap",
                       "use_distributed_optimizer": "distributed_optimizer"}.get(_k["name"], _k["name"])
''')
    return path


@pytest.mark.parametrize("seed", [0, 1])
def test_a_requirement_learned_on_one_campaign_saves_the_next_its_crashes(tmp_path: Path, seed: int) -> None:
    """End to end on the simulated write-back: a GPT 13B campaign on two H100 nodes learns that overlapping the
    parameter all-gather crashes without the distributed optimizer; the bank carries it to the next campaign on
    the same cluster, which never runs that crash."""
    land = load_landscape(gpt13b_with_environment(tmp_path))
    knobs = T.landscape_knobs(land)
    env = T.landscape_environment(land, knobs)

    def crashes(camp) -> int:
        return sum(1 for c, o in camp.result.trials if o.status == "crash")

    source = simulate_campaign(land, "infrarsi", seed, 30)
    _, obs, _ = T.campaign_records(land, source, "src")
    pair = (("param_gather_overlap", knobs[[k.name for k in knobs].index("overlap_param_gather")].canonical_of(True)),
            ("distributed_optimizer",
             knobs[[k.name for k in knobs].index("use_distributed_optimizer")].canonical_of(True)))
    assert any(pair in o.requirements for o in obs), "the source's crashes were written without their requirement"
    assert crashes(source) >= 2
    carried = requirements(obs, {env.digest(): env}, env, knobs, "filtered")
    assert {"requires": [["overlap_param_gather", True], ["use_distributed_optimizer", True]]} in carried
    target = simulate_campaign(land, "infrarsi", seed + 100, 30, experience=carried)
    cold = simulate_campaign(land, "infrarsi", seed + 100, 30)
    assert crashes(target) == 0 and crashes(cold) >= 1


def test_doctor_and_the_report_show_the_rules_carried_in() -> None:
    from infrarsi.controller.experience.doctor import carried_rules
    from infrarsi.controller.report.sections import experience_section

    records = [{"knob": "fp8", "value": True, "log_speedup": 0.1, "prior_sd": 0.05},
               {"conflict": [["fp8", True], ["zero_stage", 3]]},
               {"suspect": [["fp8", True], ["use_flash_attn", True]]},
               {"requires": [["overlap_param_gather", True], ["use_distributed_optimizer", True]]}]
    rules = carried_rules(records)
    assert rules == ["fp8=True & zero_stage=3: known conflict", "fp8=True & use_flash_attn=True: suspected conflict",
                     "overlap_param_gather=True needs use_distributed_optimizer=True"]
    text = experience_section({"experience": {"grades": {"fp8": "partial"}, "rules": rules}})
    assert "| fp8 | partial |" in text
    assert "- overlap_param_gather=True needs use_distributed_optimizer=True" in text
    assert "Rules carried" not in experience_section({"experience": {"grades": {"fp8": "partial"}}})
    assert carried_rules(None) == [] and carried_rules([{"knob": "x"}]) == []
