"""Which of a failed run's settings its error message names.

A crash leaves several conflict hypotheses open (:meth:`FailureLedger.suspects`: every pair of its settings no
passing run held), and a blind first wave of crashes leaves them all tied on evidence.  The message usually
says which components were involved ("torch._dynamo hit config.recompile_limit (8) in liger_rms_norm" names
torch.compile and the Liger kernels; "ZeRO-3 cannot partition Float8Tensor parameters" names the ZeRO stage and
FP8), as an engineer reading it would see.  :func:`named_settings` turns that into a tie-breaker: the settings
whose knob name or value shares a distinctive word with the message.

Matching is lexical and deliberately plain: the message and each setting's knob name and (non-boolean) value
are split into lower-case words (on non-alphanumerics and before a capitalised word inside another:
``Float8Tensor``, not ``ZeRO``); generic configuration words (:data:`STOPWORDS`) and words shorter than three
letters are dropped; two words match when equal, when they share a prefix of at least :data:`PREFIX` letters
(``flash2`` / ``flash``, ``overlap`` / ``overlapped``), or when both belong to one group of :data:`ALIASES` (names the same component goes by in error messages:
``dynamo`` and ``inductor`` are torch.compile).  It only ranks hypotheses the evidence leaves tied; it never
opens or closes one (the ledger's bans stay what the passing runs allow).  Pure functions of their arguments.
"""

from __future__ import annotations

import re
from typing import Iterable

from infrarsi.controller.search.space import Setting

#: letters two words must share at their start to match (without an alias)
PREFIX = 5
#: words that name no component: configuration and English filler
STOPWORDS = frozenset("""
    the and for with use using enable enabled disable disabled num number size mode type impl implementation backend
    per device devices train training model level stage degree max min cap true false none off auto default
    kernel kernels torch data batch not only need needs require requires required has have this that are was
    from into cannot can does fails failed failure error path value values config option options flag flags
    parallel parallelism fused fuse
    receipt job exit code line log last ended rank worker process status signal
""".split())
#: groups of words that name one component in error messages
ALIASES: tuple[frozenset[str], ...] = (
    frozenset({"compile", "compiled", "dynamo", "inductor", "recompile", "trace", "traced", "traceable"}),
    frozenset({"fp8", "float8", "e4m3", "e5m2", "amax", "transformerengine"}),
    frozenset({"flash", "flashattention", "fa2", "fa3"}),
    frozenset({"checkpoint", "checkpointing", "recompute", "recomputed", "recomputation", "ckpt", "remat"}),
)
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z][a-z])")
#: what a message holds that names no component: the ``(log: <path>)`` the ingest appends, absolute paths
_NOISE = (re.compile(r"\(log: [^)]*\)\s*$"), re.compile(r"(?<![\w.])/[\w.\-/]+"))
_SPLIT = re.compile(r"[^a-z0-9]+")


def words(text: str) -> set[str]:
    """The distinctive words of ``text``: without the ingest's ``(log: <path>)`` suffix and absolute paths (a
    work directory's name is the user's, not the error's), split before a capitalised word inside another and on
    non-alphanumerics, lower-cased, without :data:`STOPWORDS`, numbers and words shorter than three characters."""
    for noise in _NOISE:
        text = noise.sub(" ", text)
    out = set()
    for w in _SPLIT.split(_HUMP.sub(" ", text).lower()):
        if len(w) >= 3 and w not in STOPWORDS and not w.isdigit():
            out.add(w)
    return out


def _match(a: str, b: str) -> bool:
    """Whether two words name one thing: equal, a shared prefix of :data:`PREFIX` letters, or one alias group."""
    if a == b:
        return True
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n >= PREFIX or any(a in g and b in g for g in ALIASES)


def setting_words(s: Setting) -> set[str]:
    """The words of a setting: its knob name's, and its value's unless the value is a boolean or a number."""
    name, value = s
    out = words(name)
    if isinstance(value, str) and value.lower() not in ("true", "false"):
        out |= words(value)
    return out


def named_settings(reason: str, settings: Iterable[Setting]) -> set[Setting]:
    """The settings of ``settings`` that ``reason`` (a failure's one-line message) names."""
    msg = words(reason or "")
    if not msg:
        return set()
    return {s for s in settings if any(_match(a, b) for a in setting_words(s) for b in msg)}
