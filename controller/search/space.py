"""Search-space value types: knobs, spaces, candidates, trial outcomes, promotions.

These are the fixed interfaces the campaign engine and the benchmark share.
All types are immutable and hashable (the optional prior dictionaries on
:class:`KnobSpec` are excluded from equality and hashing).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping

#: A non-reference knob setting ``(knob_name, value)`` or a patch ``("@patch", name)``.
Setting = tuple[str, Any]
PATCH = "@patch"

Status = Literal["ok", "oom", "crash", "rejected"]


@dataclass(frozen=True)
class KnobSpec:
    """One launch knob.

    ``values`` lists every legal value (``reference`` among them).  ``ordered``
    says the values lie on an axis (micro-batch, bucket size) so extrapolation
    along it makes sense.  Optional priors: ``prior_mean`` maps a value to its
    prior single-knob log-speedup vs the reference (default 0), ``prior_sd`` is
    the prior spread (default from the controller), ``mem_prior_gib`` maps a
    value to its prior peak-memory delta in GiB vs the reference.
    """

    name: str
    values: tuple
    reference: object
    ordered: bool = False
    mechanism: str | None = None
    prior_mean: Mapping[Any, float] | None = field(default=None, compare=False, hash=False)
    prior_sd: float | None = field(default=None, compare=False, hash=False)
    mem_prior_gib: Mapping[Any, float] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.name or self.name.startswith("@"):
            raise ValueError(f"knob name {self.name!r} is empty or starts with '@'")
        for v in self.values:
            try:
                hash(v)
            except TypeError:
                raise ValueError(f"knob {self.name}: value {v!r} is not hashable (use scalars or tuples)") from None
        if self.reference not in self.values:
            raise ValueError(f"knob {self.name}: reference {self.reference!r} is not among values {self.values!r}")
        if len(set(map(_canon, self.values))) != len(self.values):
            raise ValueError(f"knob {self.name}: duplicate values")

    def prior_of(self, value: object) -> float:
        """Prior log-speedup of ``value`` vs reference (0 for the reference or when unknown)."""
        if value == self.reference or not self.prior_mean:
            return 0.0
        return float(self.prior_mean.get(value, 0.0))

    def mem_prior_of(self, value: object) -> float:
        """Prior peak-memory delta (GiB) of ``value`` vs reference (0 when unknown)."""
        if value == self.reference or not self.mem_prior_gib:
            return 0.0
        return float(self.mem_prior_gib.get(value, 0.0))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "KnobSpec":
        """Build from a landscape/contract dict with keys name, values, reference and optional extras."""
        for key in ("name", "values", "reference"):
            if key not in d:
                raise ValueError(f"knob {d.get('name', '?')}: missing key {key!r}")
        return cls(
            name=str(d["name"]), values=tuple(d["values"]), reference=d["reference"],
            ordered=bool(d.get("ordered", False)), mechanism=d.get("mechanism"),
            prior_mean=dict(d["prior_mean"]) if d.get("prior_mean") else None,
            prior_sd=float(d["prior_sd"]) if d.get("prior_sd") is not None else None,
            mem_prior_gib=dict(d["mem_prior_gib"]) if d.get("mem_prior_gib") else None,
        )


@dataclass(frozen=True)
class SearchSpace:
    """The knobs, the candidate patches, and an optional legality predicate over config dicts."""

    knobs: tuple[KnobSpec, ...]
    patches: tuple[str, ...] = ()
    is_legal: Callable[[dict], bool] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise ValueError("duplicate knob names in search space")

    def knob(self, name: str) -> KnobSpec:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    def knob_names(self) -> list[str]:
        return [k.name for k in self.knobs]

    def reference_config(self) -> dict:
        return {k.name: k.reference for k in self.knobs}

    def reference(self) -> "Candidate":
        return Candidate.from_dict(self.reference_config())

    def size(self) -> int:
        n = 1
        for k in self.knobs:
            n *= len(k.values)
        return n * (2 ** len(self.patches))

    def check(self, cand: "Candidate") -> None:
        """Raise ValueError unless ``cand`` sets every knob to one of its values and names known patches."""
        d = cand.as_dict()
        names = {k.name for k in self.knobs}
        if set(d) != names:
            raise ValueError(f"candidate knobs {sorted(d)} differ from the space's {sorted(names)}")
        for k in self.knobs:
            if d[k.name] not in k.values:
                raise ValueError(f"candidate sets knob {k.name} to {d[k.name]!r}, not one of {k.values!r}")
        unknown = set(cand.patches) - set(self.patches)
        if unknown:
            raise ValueError(f"candidate names unknown patches {sorted(unknown)}")

    def legal(self, config: Mapping[str, Any]) -> bool:
        return True if self.is_legal is None else bool(self.is_legal(dict(config)))


def _canon(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class Candidate:
    """A full launch configuration plus a set of patches.  Hashable; ``config`` is sorted by knob name."""

    config: tuple[tuple[str, object], ...]
    patches: frozenset[str] = frozenset()

    @classmethod
    def from_dict(cls, config: Mapping[str, Any], patches: Iterable[str] = ()) -> "Candidate":
        return cls(tuple(sorted(config.items())), frozenset(patches))

    @property
    def signature(self) -> str:
        """Stable canonical id: sha1 of the sorted JSON of config and patches."""
        blob = json.dumps({"config": [[k, v] for k, v in self.config], "patches": sorted(self.patches)},
                          sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()

    def as_dict(self) -> dict:
        return dict(self.config)

    def value(self, name: str) -> object:
        for k, v in self.config:
            if k == name:
                return v
        raise KeyError(name)

    def is_reference(self, space: SearchSpace) -> bool:
        return not self.patches and self.as_dict() == space.reference_config()

    def settings(self, space: SearchSpace) -> frozenset[Setting]:
        """Non-reference settings and patches, as ``(name, value)`` / ``("@patch", name)``."""
        d = self.as_dict()
        out = {(k.name, d[k.name]) for k in space.knobs if d.get(k.name, k.reference) != k.reference}
        out |= {(PATCH, p) for p in self.patches}
        return frozenset(out)

    def with_values(self, changes: Mapping[str, Any], patches: Iterable[str] | None = None) -> "Candidate":
        d = self.as_dict()
        d.update(changes)
        return Candidate.from_dict(d, self.patches if patches is None else patches)


@dataclass(frozen=True)
class Outcome:
    """What one trial produced.  ``gpu_hours`` is what it cost, failures included."""

    status: Status
    step_time_s: float | None = None
    peak_mem_gib: float | None = None
    requested_gib: float | None = None
    capacity_gib: float | None = None
    reason: str = ""
    rejected_layer: str | None = None
    gpu_hours: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in ("ok", "oom", "crash", "rejected"):
            raise ValueError(f"outcome status {self.status!r} is not one of ok/oom/crash/rejected")
        if self.status == "ok" and (self.step_time_s is None or not self.step_time_s > 0):
            raise ValueError("an ok outcome needs a positive step_time_s")


@dataclass(frozen=True)
class Promotion:
    """The promoted candidate (None: keep the reference) and its delivered speedup (1.0 when none)."""

    candidate: Candidate | None
    speedup: float
    reason: str


def settings_key(s: Setting) -> str:
    """A total order on settings (values may be of mixed types)."""
    return f"{s[0]}={_canon(s[1])}"
