"""What a proposer returns, validated with pydantic before anything uses it (strict: unknown fields are errors).

* :class:`KnobPrior` -- a quantitative prior for one knob value: the mean log-speedup it is expected to give over
  the reference value, its spread (one standard deviation, > 0) and optionally ``mem_gib``, the change of peak
  memory per GPU in GiB against the reference value (negative saves memory; the contract's ``Knob.priors``
  ``memory_gib`` means the same).  Values are
  given in their string form (``"true"``, ``"8"``, ``"bf16"``); :func:`match_value` finds the contract value a
  string names.
* :class:`PatchProposal` -- a unified diff on editable files, a one-line rationale (<= 200 characters) and the
  claimed gain as a log-speedup (shrunk by the caller: models are optimistic).
* :class:`Proposal` -- both lists.  :func:`parse_proposal` turns a model's text answer into a Proposal or raises
  :class:`ProposalError` with a one-line reason.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_RATIONALE_CHARS = 200
MAX_DIFF_CHARS = 200_000
MAX_PRIORS = 1000
MAX_PATCHES = 20
#: a log-speedup beyond +-ln(1000) is not a claim anyone should act on
MAX_LOG_SPEEDUP = math.log(1000.0)


class ProposalError(ValueError):
    """A proposer's answer is not a valid proposal; the message is one line naming what is wrong."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class KnobPrior(_Strict):
    """Prior belief about one knob value relative to the reference configuration."""

    knob: str = Field(min_length=1, max_length=100)
    value: str = Field(max_length=1000)
    mean_log_speedup: float = Field(ge=-MAX_LOG_SPEEDUP, le=MAX_LOG_SPEEDUP)
    spread: float = Field(gt=0, le=10.0)
    mem_gib: float | None = Field(default=None, ge=-1_000_000.0, le=1_000_000.0)

    @field_validator("mean_log_speedup", "spread", "mem_gib", mode="before")
    @classmethod
    def _int_ok(cls, v: Any) -> Any:
        # strict mode refuses ints for floats; a model writing 0 or 1 means a float
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class PatchProposal(_Strict):
    """A candidate source patch.  ``name`` is optional (the folder proposer keeps its file names; the caller names
    model patches)."""

    diff: str = Field(min_length=1, max_length=MAX_DIFF_CHARS)
    rationale: str = Field(default="", max_length=MAX_RATIONALE_CHARS)
    claimed_gain: float = Field(default=0.0, ge=-MAX_LOG_SPEEDUP, le=MAX_LOG_SPEEDUP)
    name: str | None = Field(default=None, max_length=100)

    @field_validator("rationale")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if "\n" in v.strip() or "\r" in v:
            raise ValueError("rationale must be one line")
        return v.strip()

    @field_validator("claimed_gain", mode="before")
    @classmethod
    def _int_ok(cls, v: Any) -> Any:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.+-]+", v):
            raise ValueError(f"patch name {v[:40]!r} may hold only letters, digits and _ . + -")
        return v


class Proposal(_Strict):
    """Knob priors and candidate patches (either list may be empty)."""

    priors: list[KnobPrior] = Field(default_factory=list, max_length=MAX_PRIORS)
    patches: list[PatchProposal] = Field(default_factory=list, max_length=MAX_PATCHES)

    @property
    def empty(self) -> bool:
        """True when the proposal holds neither a prior nor a patch."""
        return not self.priors and not self.patches


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)\n```", re.DOTALL)


def _json_text(text: str) -> str:
    """The JSON object in ``text``: the whole text, else the first fenced ```json block, else the outermost braces."""
    s = text.strip()
    if s.startswith("{"):
        return s
    m = _FENCE.search(s)
    if m:
        return m.group(1).strip()
    a, b = s.find("{"), s.rfind("}")
    if a >= 0 and b > a:
        return s[a:b + 1]
    return s


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "answer"
    return f"{where}: {err.get('msg', 'invalid')}"


def parse_proposal(text: str | None) -> Proposal:
    """Parse a model's answer (a JSON object, possibly inside a fenced block) into a :class:`Proposal`.

    Raises :class:`ProposalError` (one line) when the answer is empty, is not JSON, or does not match the schema.
    """
    if text is None or not text.strip():
        raise ProposalError("empty answer")
    raw = _json_text(text)
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = getattr(exc, "msg", str(exc))
        raise ProposalError(f"answer is not JSON ({msg})") from None
    if not isinstance(data, dict):
        raise ProposalError(f"answer is a JSON {type(data).__name__}, not an object with 'priors' and 'patches'")
    try:
        return Proposal.model_validate(data)
    except ValidationError as exc:
        raise ProposalError(f"answer does not match the schema: {_first_error(exc)}") from None


def value_text(value: Any) -> str:
    """The string form a prior uses for a contract value: booleans as ``true``/``false``, others via ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def match_value(values: list[Any], text: str) -> Any:
    """The contract value in ``values`` whose string form is ``text`` (case-insensitive for booleans and strings,
    numerically for numbers; ``true``/``on``/``yes`` and ``false``/``off``/``no`` name 1 and 0 of a knob whose
    values are 0 and 1); ``None`` when none matches."""
    t = text.strip()
    for v in values:
        if value_text(v) == t:
            return v
    for v in values:
        if isinstance(v, bool) or isinstance(v, str):
            if value_text(v).lower() == t.lower():
                return v
        else:
            try:
                if float(t) == float(v):
                    return v
            except ValueError:
                pass
    # an on/off knob spelled 0/1 (``--compile=1``): a model may write true/false, on/off
    word = {"true": 1, "on": 1, "yes": 1, "false": 0, "off": 0, "no": 0}.get(t.lower())
    if word is not None:
        numbers = [v for v in values if not isinstance(v, (bool, str))]
        if numbers and {float(v) for v in numbers} <= {0.0, 1.0}:
            return next((v for v in numbers if float(v) == word), None)
    return None
