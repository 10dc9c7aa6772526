"""Which settings a failure's message names (controller/search/naming.py), and the ledger's use of it: a tie
among conflict tuples goes to the one the message names, and nothing the evidence decides changes."""

from __future__ import annotations

from infrarsi.controller.search.failures import FailureLedger
from infrarsi.controller.search.naming import named_settings, words
from infrarsi.controller.search.space import Outcome

LIGER, COMPILE = ("liger_kernels", True), ("torch_compile", True)
FLASH, FP8 = ("attention", "flash2"), ("fp8", True)
ZERO3, OVERLAP = ("zero_stage", 3), ("overlap_comm", True)
RECOMPILE = "torch._dynamo hit config.recompile_limit (8) in liger_rms_norm"


def test_words_split_identifiers_and_drop_generic_ones() -> None:
    assert words("torch._dynamo hit config.recompile_limit (8) in liger_rms_norm") \
        == {"dynamo", "hit", "recompile", "limit", "liger", "rms", "norm"}
    assert words("ZeRO-3 cannot partition Float8Tensor parameters") == {"zero", "partition", "float8", "tensor", "parameters"}


def test_a_message_names_settings_by_knob_name_value_prefix_and_alias() -> None:
    sets = {LIGER, COMPILE, FLASH, FP8, ZERO3, OVERLAP}
    assert named_settings(RECOMPILE, sets) == {LIGER, COMPILE}  # liger by name; dynamo is torch.compile
    assert named_settings("ZeRO-3 cannot partition Float8Tensor parameters", sets) == {ZERO3, FP8}
    assert named_settings("FlashAttention only supports fp16 and bf16", sets) == {FLASH}  # flash2 ~ flash
    assert named_settings("deadlock: interleaved 1F1B with overlapped p2p", sets) == {OVERLAP}
    assert named_settings("", sets) == set() and named_settings("segmentation fault", sets) == set()
    # booleans and numbers are not words: a value of True names nothing by itself
    assert named_settings("True", {("x", True)}) == set()


def _wave(names: bool) -> FailureLedger:
    """A blind first wave: three crashes with one message, every one holding liger, compile and flash; one
    passing run holding liger and flash without compile.  Evidence ties liger x compile with flash x compile."""
    led = FailureLedger(names=names, risk=lambda s: {FLASH: 0.10, COMPILE: 0.06, LIGER: 0.02}.get(s, 0.0))
    led.record(frozenset({LIGER, FLASH}), Outcome("ok", step_time_s=1.0), lambda s: 0.0)
    for extra in (FP8, OVERLAP, ZERO3):
        led.record(frozenset({LIGER, COMPILE, FLASH, extra}), Outcome("crash", reason=RECOMPILE), lambda s: 0.0)
    return led


def test_the_named_tuple_wins_a_tie_the_risk_rule_would_give_to_another() -> None:
    plain, named = _wave(False), _wave(True)
    assert set(plain.minimal_tuple(frozenset({LIGER, COMPILE, FLASH, FP8}))) == {COMPILE, FLASH}  # most aggressive
    assert set(named.minimal_tuple(frozenset({LIGER, COMPILE, FLASH, FP8}))) == {LIGER, COMPILE}
    assert (LIGER, COMPILE) in [tuple(sorted(t)) for t in named.banned]
    assert named.blocked(frozenset({FLASH, COMPILE})) is None and named.blocked(frozenset({LIGER, COMPILE}))


def test_a_name_never_outranks_the_evidence_or_reopens_a_passing_pair() -> None:
    led = _wave(True)
    led.record(frozenset({LIGER, COMPILE}), Outcome("ok", step_time_s=1.0), lambda s: 0.0)  # liger x compile passes
    assert all(set(t) != {LIGER, COMPILE} for t in led.banned)
    assert led.blocked(frozenset({LIGER, COMPILE})) is None
    # a pair held by more crash records of the kind beats a named pair held by fewer (the message names liger)
    led2 = FailureLedger(names=True)
    led2.record(frozenset({FLASH, FP8, LIGER}), Outcome("crash", reason="liger kernel launch failed"), lambda s: 0.0)
    led2.record(frozenset({FLASH, FP8, ZERO3}), Outcome("crash", reason="liger kernel launch failed"), lambda s: 0.0)
    assert set(led2.minimal_tuple(frozenset({FLASH, FP8, LIGER}))) == {FLASH, FP8}


def test_a_message_naming_a_setting_and_its_missing_partner_makes_one_crash_a_requirement() -> None:
    """Gemma on the L40S: every passing run held torch.compile, and FP8 crashes without it.  After one crash the
    evidence ties "FP8 needs compile" with the pair of FP8 and another present setting; the message names FP8
    and compile, so with names the requirement explains it at once (without, the pair ban is kept on the tie)."""
    K, G = ("torch_compile", True), ("gradient_checkpointing", False)
    why = "the float8 training path requires torch.compile"

    def ledger(names: bool) -> FailureLedger:
        led = FailureLedger(names=names)
        for rec in ({K, G, LIGER}, {K, G}):
            led.record(frozenset(rec), Outcome("ok", step_time_s=1.0), lambda s: 0.0)
        led.record(frozenset({FP8, G, LIGER}), Outcome("crash", reason=why), lambda s: 0.0)
        return led
    assert ledger(False).requirements == [] and ledger(False).banned
    named = ledger(True)
    assert named.requirements == [(FP8, K)] and named.banned == []
    assert named.blocked(frozenset({FP8, G})) == "fp8=true needs torch_compile=true"
    assert named.blocked(frozenset({FP8, K, G})) is None
    # a message that names only one side keeps the pair ban on the tie
    led = FailureLedger(names=True)
    for rec in ({K, G, LIGER}, {K, G}):
        led.record(frozenset(rec), Outcome("ok", step_time_s=1.0), lambda s: 0.0)
    led.record(frozenset({FP8, G, LIGER}), Outcome("crash", reason="float8 scaling overflow"), lambda s: 0.0)
    assert led.requirements == [] and led.banned


def test_the_ingest_s_log_suffix_and_paths_name_nothing() -> None:
    """A real crash's reason ends with the log's path under the user's work directory; a knob must not be named
    by a directory that happens to share its word."""
    why = ("RuntimeError: torch._dynamo hit config.recompile_limit (8) in liger_rms_norm "
           "(log: /scratch/fp8_overlap_runs/trials/0123456789abcdef/out/job.log)")
    assert words(why) == {"runtime", "dynamo", "hit", "recompile", "limit", "liger", "rms", "norm"}
    assert named_settings(why, {LIGER, COMPILE, FP8, OVERLAP}) == {LIGER, COMPILE}
    assert named_settings("receipt: job ended with exit code 2; last log line: error in /opt/fp8/x.py",
                          {FP8}) == set()
    assert named_settings("flash attention requires fp16/bf16 inputs", {("precision", "bf16")}) \
        == {("precision", "bf16")}  # a slash between words is not a path
