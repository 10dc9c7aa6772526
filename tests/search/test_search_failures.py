"""Failure attribution: OOM tagging and exclusion, minimal conflict tuples, patch blame."""

from __future__ import annotations

from infrarsi.controller.search.failures import FailureLedger, failure_signature, told_failure
from infrarsi.controller.search.space import PATCH, Outcome

from tests.search.conftest import max_share

OK = Outcome("ok", step_time_s=1.0)
CRASH = Outcome("crash", reason="boom")
A, B, C, D = ("a", 1), ("b", 1), ("c", 1), ("d", 1)


def test_minimal_pair_absent_from_passing_runs_is_banned_not_the_singles():
    led = FailureLedger()
    led.record(frozenset({A, B}), OK, lambda s: 0.0)
    led.record(frozenset({C}), OK, lambda s: 0.0)
    led.record(frozenset({A, B, C}), CRASH, lambda s: 0.0)
    # pairs of {A,B,C}: AB passed together; AC and BC never did -> one of those is banned
    assert len(led.banned) == 1 and set(led.banned[0]) in ({A, C}, {B, C})
    assert led.blocked(frozenset({A})) is None and led.blocked(frozenset({C})) is None
    banned = set(led.banned[0])
    assert led.blocked(frozenset(banned | {D})) is not None


def test_ban_is_exonerated_when_the_pair_later_passes():
    led = FailureLedger()
    led.record(frozenset({A, B, C}), CRASH, lambda s: 0.0)
    first = set(led.banned[0])
    led.record(frozenset(first), OK, lambda s: 0.0)
    assert first not in [set(t) for t in led.banned]
    assert led.banned, "another pair of the crash must now carry the blame"


def test_repeated_crashes_converge_on_the_common_pair():
    led = FailureLedger()
    led.record(frozenset({A, B, C}), CRASH, lambda s: 0.0)
    led.record(frozenset({B, C, D}), CRASH, lambda s: 0.0)
    assert {B, C} in [set(t) for t in led.banned]


def test_oom_tags_spender_and_excludes_only_after_distinct_savers():
    delta = {("big", 1): 20.0, ("s1", 1): -5.0, ("s2", 1): -6.0, ("s3", 1): -4.0}.get
    led = FailureLedger(exclude_after=3)
    oom = Outcome("oom", requested_gib=90.0, capacity_gib=80.0)
    led.record(frozenset({("big", 1)}), oom, lambda s: delta(s, 0.0))
    assert led.needs_saver[("big", 1)] == 10.0 and ("big", 1) not in led.excluded
    for saver in (("s1", 1), ("s2", 1)):
        led.record(frozenset({("big", 1), saver}), oom, lambda s: delta(s, 0.0))
    assert ("big", 1) not in led.excluded
    led.record(frozenset({("big", 1), ("s1", 1)}), oom, lambda s: delta(s, 0.0))  # same saver set again
    assert ("big", 1) not in led.excluded
    led.record(frozenset({("big", 1), ("s3", 1)}), oom, lambda s: delta(s, 0.0))
    assert ("big", 1) in led.excluded
    assert led.blocked(frozenset({("big", 1), ("s1", 1)})) is not None


def test_failed_patch_is_blamed_on_the_patch_not_the_config():
    led = FailureLedger()
    led.record(frozenset({A}), OK, lambda s: 0.0)
    blame = led.record(frozenset({A, B, (PATCH, "p")}), CRASH, lambda s: 0.0)
    assert "patch" in blame and "p" in led.banned_patches
    assert led.banned == [] and led.crash_records == []
    assert led.blocked(frozenset({A, B})) is None
    assert led.blocked(frozenset({(PATCH, "p")})) is not None


def test_a_patch_probe_on_a_configuration_that_fails_alone_is_not_blamed():
    """A patch probed beside its busy, untold base (parallel slots): the base fails on its own, the same way."""
    led = FailureLedger()
    base = frozenset({A, B})
    led.record(base, CRASH, lambda s: 0.0)  # the base told first
    led.record(base | {(PATCH, "p")}, CRASH, lambda s: 0.0)
    assert "p" not in led.banned_patches
    # the probe told first: the patch is banned, then cleared when its base fails the same way
    led = FailureLedger()
    led.record(base | {(PATCH, "q")}, CRASH, lambda s: 0.0)
    assert "q" in led.banned_patches
    led.record(base, CRASH, lambda s: 0.0)
    assert "q" not in led.banned_patches
    # a different failure of the base does not clear it
    led = FailureLedger()
    led.record(base | {(PATCH, "r")}, CRASH, lambda s: 0.0)
    led.record(base, Outcome("rejected", step_time_s=1.0), lambda s: 0.0)
    assert "r" in led.banned_patches


def test_share_of_a_crash_s_open_pairs_a_candidate_holds():
    led = FailureLedger()
    crashed = frozenset({A, B, C, D})  # six pairs, none seen passing
    led.record(crashed, CRASH, lambda s: 0.0)
    assert max_share(led, crashed - {D}) == 3 / 6  # one setting switched: the three pairs without D stay open
    assert max_share(led, frozenset({A, B})) == 1 / 6
    assert max_share(led, frozenset({("e", 1)})) == 0.0
    led.record(frozenset({A, B, C}), OK, lambda s: 0.0)  # exonerates AB, AC, BC: only pairs with D stay open
    assert sorted(led.suspects(crashed)) == [(A, D), (B, D), (C, D)]
    assert max_share(led, crashed - {D}) == 0.0 and max_share(led, frozenset({A, D})) == 1 / 3


def test_share_of_a_one_setting_crash_is_that_setting_until_it_passes():
    led = FailureLedger()
    led.record(frozenset({A}), Outcome("rejected", reason="loss moved"), lambda s: 0.0)
    assert max_share(led, frozenset({A, B})) == 1.0
    led.record(frozenset({A, C}), OK, lambda s: 0.0)
    assert max_share(led, frozenset({A, B})) == 0.0


def test_a_setting_that_crashed_alone_first_is_banned_outright():
    led = FailureLedger()
    led.record(frozenset({A}), CRASH, lambda s: 0.0)
    assert led.blocked(frozenset({A, B})) is not None


def test_a_setting_that_crashed_beside_partners_and_then_alone_stays_open_as_needing_one():
    # the requires dependency: A (unpadding) crashes with C (compile); alone it crashes too, because it needs B
    # (flash attention).  Banning A outright would lose A + B for good.
    led = FailureLedger()
    led.record(frozenset({A, B, C}), CRASH, lambda s: 0.0)
    led.record(frozenset({A}), CRASH, lambda s: 0.0)
    assert (A,) not in led.banned
    assert led.blocked(frozenset({A, D})) is None, "A itself is not banned"
    assert led.summary()["banned_tuples"], "the first crash's conflict is still banned"


def test_a_setting_rejected_alone_after_crashing_beside_partners_is_still_banned():
    # a numerics rejection is the setting's own doing, partner or not
    led = FailureLedger()
    led.record(frozenset({A, B, C}), CRASH, lambda s: 0.0)
    led.record(frozenset({A}), Outcome("rejected", reason="loss moved"), lambda s: 0.0)
    assert (A,) in led.banned
    assert led.blocked(frozenset({A, D})) is not None


def test_a_suspected_tuple_breaks_a_tie_but_never_outranks_this_campaign_s_crashes():
    led = FailureLedger(suspected=[(A, C)], risk=lambda s: {B: 1.0}.get(s, 0.0))
    assert led.blocked(frozenset({A, C})) is None, "a suspect alone bans nothing"
    led.record(frozenset({A, B, C}), CRASH, lambda s: 0.0)
    assert [set(t) for t in led.banned] == [{A, C}]  # without the hint, B's risk would pick a pair with B
    led.record(frozenset({B, C, D}), CRASH, lambda s: 0.0)
    assert {B, C} in [set(t) for t in led.banned], "two crashes implicating B x C outrank the hint"


def test_a_setting_that_crashes_without_its_partner_is_blocked_without_it_and_its_pair_bans_lifted():
    """The attack on the old ledger (heldout_gpt13b_twonode_h100): G (overlap the parameter all-gather) crashes
    without D (the distributed optimizer).  Crashes of G beside M (micro-batch 2) before any G passed pinned the
    blame on G & M, which blocked the peak G+D+M for good; a later G-without-D crash had no open tuple at all."""
    G, M, T = ("overlap_param_gather", True), ("micro_batch", 2), ("tp", 4)
    Dopt = ("distopt", True)
    led = FailureLedger()
    for rec in ({G, M, T}, {G, M}, {G, M, A}):
        led.record(frozenset(rec), CRASH, lambda s: 0.0)
    assert {G, M} in [set(t) for t in led.banned]
    assert led.requirements == []  # G never passed: nothing says what it needs
    led.record(frozenset({G, Dopt, T}), OK, lambda s: 0.0)
    led.record(frozenset({G, T, A}), CRASH, lambda s: 0.0)  # 4 crashes of G without D, 3 of G & M
    assert led.requirements == [(G, Dopt)]
    assert led.blocked(frozenset({G, T})) == "overlap_param_gather=true needs distopt=true"
    assert led.blocked(frozenset({G, M, Dopt, T})) is None, "the peak is open again"
    assert led.summary()["requirements"] == [["overlap_param_gather=true", "distopt=true"]]
    led.record(frozenset({G, A}), OK, lambda s: 0.0)  # G passes without D: the requirement is exonerated
    assert (G, Dopt) not in led.requirements


def test_a_true_pair_conflict_keeps_its_pair_ban_over_a_coincidental_partner():
    # A & B crash; A passed once, beside C: "A needs C" explains exactly the records the pair does -> the pair
    led = FailureLedger()
    led.record(frozenset({A, C}), OK, lambda s: 0.0)
    led.record(frozenset({A, B}), CRASH, lambda s: 0.0)
    assert [set(t) for t in led.banned] == [{A, B}] and led.requirements == []


def test_a_setting_that_never_passed_may_need_what_every_passing_run_held():
    """Gemma 9B on the L40S: FP8 crashes without torch.compile, and every run that passed so far held compile.
    An escape dropped compile and added FP8 (crash), its revert kept both (crash), and the backtrack ran FP8 alone
    (crash).  The old ledger could only blame pairs of present settings (FP8 & no checkpointing, which the passing
    runs also held), so FP8 stayed a suspect for twenty trials; now "FP8 needs compile" explains all three
    crashes and FP8 with compile is open again."""
    F, K, G, B1, B4 = ("fp8", True), ("compile", True), ("ckpt", False), ("bucket", 100), ("bucket", 400)
    led = FailureLedger()
    for rec in ({K, G, A}, {K, G}, {K, A}):
        led.record(frozenset(rec), OK, lambda s: 0.0)
    led.record(frozenset({F, G, A, B1}), CRASH, lambda s: 0.0)
    led.record(frozenset({F, G, A, B4}), CRASH, lambda s: 0.0)
    assert led.requirements == []  # two crashes each: the pair ban is kept on a tie
    led.record(frozenset({F}), CRASH, lambda s: 0.0)
    assert led.requirements == [(F, K)]
    assert led.blocked(frozenset({F, G, A})) == "fp8=true needs compile=true"
    assert led.blocked(frozenset({F, K, G, A})) is None, "FP8 with compile is open again"


def test_a_setting_in_two_failures_that_never_passed_is_their_common_factor_until_it_passes():
    """FP8 attention that shifts the loss fails beside a, then beside b, while a and b pass: the pair rule
    blames (fp8, a) and (fp8, b), and only ``common_factors`` names fp8 itself; once fp8 passes it is not."""
    F8 = ("fp8", 1)
    led = FailureLedger()
    led.record(frozenset({A}), OK, lambda s: 0.0)
    led.record(frozenset({B}), OK, lambda s: 0.0)
    led.record(frozenset({F8, A}), CRASH, lambda s: 0.0)
    assert led.common_factors() == {}  # one record is no pattern
    led.record(frozenset({F8, B}), CRASH, lambda s: 0.0)
    assert led.common_factors() == {F8: frozenset({0, 1})}
    assert led.blocked(frozenset({F8, C})) is None  # no ban: only the controller's admission uses it
    led.record(frozenset({F8, D}), OK, lambda s: 0.0)
    assert led.common_factors() == {}


def test_failures_that_share_several_untried_settings_name_no_common_factor():
    """A first wave whose crashes all hold the same two untried settings (the fused scan kernel and compile)
    cannot say which of them is at fault: neither is a common factor; the one outside a later record is."""
    led = FailureLedger()
    led.record(frozenset({A, B, C}), CRASH, lambda s: 0.0)
    led.record(frozenset({A, B, D}), CRASH, lambda s: 0.0)
    assert led.common_factors() == {}
    led.record(frozenset({A, C, D}), CRASH, lambda s: 0.0)  # without B: A is common to all three, B to two of them
    assert led.common_factors() == {A: frozenset({0, 1, 2})}


def test_told_failure_is_the_status_and_reason_the_ledger_and_the_report_share():
    assert told_failure("rejected", None) == ("rejected", "")
    assert told_failure("rejected", "loss 2.1") == ("rejected", "loss 2.1")
    assert told_failure("timeout", None) == ("crash", "timeout")
    assert told_failure("crash", "RuntimeError: x") == ("crash", "RuntimeError: x")
    assert told_failure("forged", "") == ("crash", "forged")


def test_a_failure_signature_masks_numbers_addresses_and_paths_but_keeps_the_error():
    drift = failure_signature("rejected", "loss 1.97 beyond tolerance 0.03")
    assert drift == failure_signature("rejected", "loss 2.0412e+00 beyond  tolerance 0.03")
    assert failure_signature("crash", "RuntimeError: bad ptr 0x7f3a12 in /opt/x/lib.so line 12") == \
        failure_signature("crash", "runtimeerror: bad ptr 0xdead in /usr/lib/y.so line 907")
    assert failure_signature("crash", "torch._dynamo hit the recompile limit") != \
        failure_signature("crash", "unpadded batches need a varlen attention kernel")
    assert drift != failure_signature("crash", "loss 1.97 beyond tolerance 0.03"), "the status is part of the kind"
    assert failure_signature("crash", "") == failure_signature("crash", "   ")


def _two_cause_ledger(signatures: bool) -> FailureLedger:
    """BERT's trap (heldout_bert_unpad_a100, slots 4): the first starts all held the fused LAMB kernel at
    micro-batch 32, so crashes of two causes (compile x unpad hits the recompile limit; unpad without flash
    has no varlen kernel) and the loss drift of fused LAMB under fp16 all hold (lamb, mb32), and the pair
    that explains the most records is the innocent one, banned for good although the peak needs it."""
    lamb, mb32, mb64, comp, unpad, flash, fp16, bf16, ckpt = (
        ("fused_lamb", True), ("micro_batch", 32), ("micro_batch", 64), ("compile", True), ("unpad", True),
        ("flash_attn", True), ("precision", "fp16"), ("precision", "bf16"), ("grad_ckpt", True))
    led = FailureLedger(signatures=signatures)
    recompile = Outcome("crash", reason="torch._dynamo hit the recompile limit on varlen shapes")
    varlen = Outcome("crash", reason="unpadded batches need a varlen attention kernel")

    def drift(loss: float) -> Outcome:
        return Outcome("rejected", step_time_s=1.0, reason=f"loss {loss} beyond tolerance 0.03")
    for ok in ({flash}, {comp}, {lamb}, {mb32}, {fp16}, {comp, flash, bf16, mb32}, {flash, unpad, mb32},
               {lamb, comp, flash}, {lamb, unpad, flash, mb64}, {lamb, bf16, mb64, ckpt}, {fp16, mb32}):
        led.record(frozenset(ok), OK, lambda s: 0.0)
    for failed, outcome in (({lamb, mb32, comp, unpad, flash, bf16}, recompile),
                            ({lamb, mb32, comp, unpad, flash, fp16}, recompile),
                            ({comp, unpad, flash, bf16, mb64}, recompile),
                            ({lamb, mb32, comp, unpad, bf16}, varlen),
                            ({lamb, mb32, fp16}, drift(1.98)), ({lamb, mb32, fp16, flash}, drift(1.9771)),
                            ({lamb, fp16, mb64, ckpt}, drift(2.01))):
        led.record(frozenset(failed), outcome, lambda s: 0.0)
    return led


def test_crashes_with_different_errors_are_not_evidence_for_one_shared_pair():
    """The attack: three kinds of failure share an innocent pair.  Counting every record as evidence bans
    (lamb, mb32) and keeps the peak (fused LAMB at micro-batch 32 in bf16) out for good; counting evidence
    among failures of the same kind bans what each kind has in common instead."""
    lamb, mb32, fp16, bf16, comp, unpad = (("fused_lamb", True), ("micro_batch", 32), ("precision", "fp16"),
                                           ("precision", "bf16"), ("compile", True), ("unpad", True))
    blind = _two_cause_ledger(signatures=False)
    assert {lamb, mb32} in [set(t) for t in blind.banned]
    assert blind.blocked(frozenset({lamb, mb32, bf16})) is not None

    led = _two_cause_ledger(signatures=True)
    bans = [set(t) for t in led.banned]
    assert {lamb, mb32} not in bans
    assert {lamb, fp16} in bans and {comp, unpad} in bans
    assert led.blocked(frozenset({lamb, mb32, bf16})) is None, "the peak's pair is open"
    assert led.blocked(frozenset({lamb, mb32, fp16})) is not None
