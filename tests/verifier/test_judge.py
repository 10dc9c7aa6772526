"""The judge as a whole: all 17 items, first failed layer, promotion, JSON, spec parsing, offline re-judging."""

from __future__ import annotations

import json

import pytest

from verifier_receipts import receipt_dict
from infrarsi.verifier import signing
from infrarsi.verifier.judge import INVARIANTS, judge, judge_raw, rejudge
from infrarsi.verifier.spec import JudgeSpec, SpecError, Verdict

MASTER = b"m" * 32


def _signed(d: dict, trial_id: str) -> bytes:
    d = dict(d, trial_id=trial_id)
    d["signature"] = signing.sign(d, signing.derive_trial_key(MASTER, trial_id))
    return json.dumps(d).encode()


def test_clean_trial_is_accepted_with_all_17_items(make, spec):
    v = judge(make(seed=1), [make(), make(seed=2)], spec)
    assert v.accepted and v.first_failed_layer is None
    assert [(it.layer, it.name) for it in v.items] == list(INVARIANTS)
    assert v.summary() == "accepted"


def test_first_failed_layer_is_the_lowest(make, spec):
    def bad(d):
        d["updates"][0]["lr"] = 1.0                     # L3
        d["header"]["model_digest"] = "z" * 64          # L2
    v = judge(make(bad), [make()], spec)
    assert not v.accepted and v.first_failed_layer == "L2"
    assert [it.name for it in v.rejecting] == ["same_model", "optimizer_steps"]
    assert v.summary().startswith("rejected at L2 same_model: ")


def test_grad_norm_vetoes_only_with_proven_first_batch(make, spec):
    doubled = lambda d: d["updates"][0].update(grad_norm=2.0)  # noqa: E731
    assert not judge(make(doubled), [make()], spec).accepted

    def doubled_other_data(d):
        doubled(d)
        for u in d["updates"]:
            u["batch_digest"] = ""
    none_logged = lambda d: [u.update(batch_digest="") for u in d["updates"]]  # noqa: E731
    v = judge(make(doubled_other_data), [make(none_logged)], spec)
    assert v.accepted, v.summary()


def test_promotion_gate(make):
    s = JudgeSpec(updates=12, window=(4, 12), sigma_pair=0.01)
    ok = judge(make(), [make()], s, rerun_times=([1.0] * 5, [0.9] * 5))
    assert ok.accepted and ok.items[13].status == "pass"
    noise = judge(make(), [make()], s, rerun_times=([1.0] * 5, [0.995] * 5))
    assert not noise.accepted and noise.first_failed.name == "speed_reproduces"


def test_verdict_json_round_trip(make, spec):
    v = judge(make(lambda d: d["wrapper"].update(exit_code=3)), [make()], spec)
    back = Verdict.from_json(json.loads(json.dumps(v.to_json())))
    assert back == v and back.first_failed_layer == "L1"


def test_spec_from_dict_round_trip_and_errors(spec):
    assert JudgeSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    with pytest.raises(SpecError, match="unknown field 'windw'"):
        JudgeSpec.from_dict({"updates": 10, "windw": [1, 2]})
    with pytest.raises(SpecError, match="window"):
        JudgeSpec.from_dict({"updates": 10, "window": [5, 11]})


def test_judge_raw_rejects_integrity_failures_at_l0(spec):
    ref = _signed(receipt_dict(), "ref")
    good = _signed(receipt_dict(seed=1), "t1")
    assert judge_raw(good, [ref], spec, MASTER, "t1").accepted
    replay = judge_raw(good, [ref], spec, MASTER, "t2")
    assert replay.first_failed_layer == "L0" and "replayed" in replay.summary()


def test_rejudge_counts_by_layer_and_invariant(spec):
    sd = spec.to_dict()
    ref = _signed(receipt_dict(), "ref")
    crashed = receipt_dict(seed=1)
    crashed["wrapper"]["exit_code"] = 1
    crashed["updates"] = crashed["updates"][:5]
    other_model = receipt_dict(seed=1)
    other_model["header"]["params"] = 7
    entries = [
        ("a", _signed(receipt_dict(seed=1), "a"), [ref], sd),
        ("b", _signed(crashed, "b"), [ref], sd),
        ("c", _signed(other_model, "c"), [ref], sd),
        ("d", _signed(receipt_dict(seed=1), "x"), [ref], sd),      # replayed
        ("e", _signed(receipt_dict(), "e"), [ref], {"updates": 3, "window": [9, 9]}),  # bad spec
    ]
    c = rejudge(entries, MASTER)
    assert (c.total, c.accepted, c.rejected) == (4, 1, 3)
    assert dict(c.by_layer) == {"L1": 1, "L2": 1, "L0": 1}
    assert c.by_invariant["completes"] == 1 and c.by_invariant["same_model"] == 1 and c.by_invariant["signature"] == 1
    assert len(c.errors) == 1 and c.errors[0].startswith("e: ")
    table = c.table()
    assert "completes" in table and "total 4: 1 valid, 3 rejected" in table


@pytest.mark.parametrize("value", ["abc", None, {"x": 1}, [1], True, "1e999"])
def test_garbage_values_from_a_misbehaving_job_never_crash_the_judge(make, spec, value):
    def garble(d):
        for key in ("loss", "grad_norm", "tokens", "opt_step", "lr", "step_time_s", "peak_mem_gib", "batch_digest"):
            d["updates"][5][key] = value
        d["header"]["params"] = value
        d["footer"]["completed"] = value
    v = judge(make(garble), [make()], spec)
    assert not v.accepted and len(v.items) == len(INVARIANTS) == 18


def test_margin_from_sigma_pair_uses_the_campaign_bound() -> None:
    """`infrarsi verify` with only sigma_pair must not promote on noise: the same UCB and floor as the campaign."""
    import math

    from infrarsi.verifier import speed

    tiny = JudgeSpec(updates=12, window=(4, 12), sigma_pair=0.0009)  # an H200 point estimate from two runs
    assert tiny.margin == pytest.approx(math.expm1(2 * speed.MIN_SIGMA_PAIR))  # floored, not 0.18%
    two_runs = JudgeSpec(updates=12, window=(4, 12), sigma_pair=0.0024, sigma_dof=1)
    assert two_runs.margin == pytest.approx(math.expm1(2 * speed.sigma_ucb(0.0024, 1)))
    assert two_runs.margin > 0.01  # one degree of freedom says little: the bound is ~6x the estimate
    assert JudgeSpec(updates=12, window=(4, 12), sigma_pair=0.001, promotion_margin=0.002).margin == 0.002
