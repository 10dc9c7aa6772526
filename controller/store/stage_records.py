"""Typed, versioned stage records: what ``init``, ``doctor``, ``run`` and ``verify`` leave in the store.

Each stage's output is one frozen pydantic model stored as JSON (``campaigns.scope_json``, ``doctor_json``,
``result_json``) with a ``schema_version``:

- :class:`Scope` (``init``): the locked commit, the frozen and editable files, the accepted and refused patches,
  the verifier's judge spec and the locked read-only inputs;
- :class:`Doctor` (``doctor``): the reference step time, the noise calibration and the reference's profile, plus the
  experience and proposer priors frozen for deterministic replay;
- :class:`PlanCandidate` (``verify``): one candidate of the promotion plan;
- :class:`Result` (``run``/``verify``): the budget when the search stopped, the promotion plan and the promotion.

Contract: a record is validated when it is built (unknown fields are refused, so a writer cannot add a key the
readers do not know), and when it is loaded (:func:`scope_of`, :func:`doctor_of`, :func:`result_of`): a
``schema_version`` newer than this code knows is a one-line :class:`StoreError` (upgrade infrarsi), an older one
was converted by the Alembic revision that introduced the newer version (``migrations/versions/0008_*``).  A row
without ``schema_version`` is read as version 1 (a memory store's rows written by tests).  Records are immutable:
change one with ``model_copy(update=...)`` and store ``dump()``.
"""

from __future__ import annotations

from typing import Any, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_serializer

from infrarsi.controller.errors import StoreError, one_line

#: the version every record written by this code carries
SCHEMA_VERSION = 1

_R = TypeVar("_R", bound="StageRecord")


class StageRecord(BaseModel):
    """Common base: frozen, unknown fields refused, ``schema_version`` stamped on every stored record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    #: keys an older infrarsi wrote that this version does not read, kept by the migration that converted the row
    #: (never read; nothing recorded is lost)
    legacy: dict[str, Any] = {}

    @model_serializer(mode="wrap")
    def _without_empty_legacy(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        if not out.get("legacy"):
            out.pop("legacy", None)
        return out

    @classmethod
    def load(cls: type[_R], data: Mapping[str, Any]) -> _R:
        """Parse a stored record; a newer ``schema_version`` or a malformed record is a one-line StoreError."""
        version = data.get("schema_version", 1)
        name = cls.__name__.lower()
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise StoreError(f"stored {name} record has schema_version {version!r}, newer than the "
                             f"{SCHEMA_VERSION} this infrarsi reads: upgrade infrarsi")
        try:
            return cls.model_validate({**data, "schema_version": SCHEMA_VERSION})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise StoreError(one_line(f"stored {name} record is malformed at {where}: {err['msg']}")) from None

    def replace(self: _R, **update: Any) -> _R:
        """A copy with ``update`` applied, validated like a new record (unknown fields refused)."""
        return type(self).model_validate({**self.model_dump(), **update})

    def dump(self) -> dict[str, Any]:
        """The JSON-able dict the store keeps (``schema_version`` included)."""
        return self.model_dump(mode="json")


class Scope(StageRecord):
    """The ``init`` lock.  Guarantees: ``commit`` is the locked commit every trial starts from; ``frozen`` maps
    each frozen file to its sha256 at that commit (the verifier's manifest); ``patches`` are the accepted diffs by
    name (every name a trial may carry), ``refused_patches`` a one-line reason per refused name; ``judge_spec`` is
    the verifier's :class:`JudgeSpec` dict without ``sigma_pair`` (that comes from :class:`Doctor`)."""

    #: the locked commit (full sha)
    commit: str
    #: the repository prefix of the contract's folder ('' at the top)
    prefix: str = ""
    #: the digest of the contract the scope was locked for
    contract_digest: str = ""
    #: frozen file -> sha256
    frozen: dict[str, str] = {}
    #: editable files (globs expanded)
    editable: list[str] = []
    #: editable file -> sha256 at the commit
    editable_digests: dict[str, str] = {}
    #: accepted patch name -> diff text
    patches: dict[str, str] = {}
    #: refused patch name -> one-line reason
    refused_patches: dict[str, str] = {}
    #: the verifier's judge spec (``verifier.receipt.JudgeSpec.from_dict``), without sigma_pair
    judge_spec: dict[str, Any] = {}
    #: locked read-only inputs (``controller/campaign/inputs.py``)
    inputs: list[dict[str, Any]] = []
    #: proposed patch name -> provenance (``controller/campaign/proposing.py``)
    patch_provenance: dict[str, dict[str, Any]] = {}
    #: proposer rounds recorded during the search
    proposal_rounds: list[dict[str, Any]] = []


class Doctor(StageRecord):
    """The ``doctor`` calibration.  Guarantees: ``t0`` is the median reference step time (seconds per update) over
    at least two accepted reference runs, whose window step times are ``reference_window_times``; ``sigma_pair``,
    ``big_knob_gate`` and ``promotion_margin`` are the noise calibration of those runs.  The experience and
    proposer fields are None when the campaign had none (records older than those features)."""

    t0: float
    reference_window_means: list[float] = []
    reference_window_times: list[list[float]]
    sigma_pair: float
    big_knob_gate: float
    promotion_margin: float
    #: mean seconds per phase over the reference runs, and their shares of the total
    phases: dict[str, float] = {}
    phase_shares: dict[str, float] = {}
    reference_peak_mem_gib: float | None = None
    #: the first reference run's receipt header extras (flops_per_token, versions, ...)
    header_extra: dict[str, Any] = {}
    #: retrieved experience records, frozen here (``controller/experience/doctor.py``)
    experience: list[dict[str, Any]] | None = None
    experience_coverage: dict[str, Any] | None = None
    experience_environment: dict[str, Any] | None = None
    #: proposers' knob priors (``controller/campaign/proposing.py``)
    proposer_priors: list[dict[str, Any]] | None = None
    proposer_priors_dropped: list[str] | None = None


class PlanCandidate(StageRecord):
    """One promotion-plan candidate: its full config, its patch names (sorted) and its signature."""

    config: dict[str, Any]
    patches: list[str] = []
    signature: str


class Result(StageRecord):
    """What ``run`` and ``verify`` record.  Guarantees: ``budget_at_search_stop`` is set once the search stopped;
    ``plan`` once verify chose its candidates (never changed afterwards); ``promotion`` once the paired re-runs
    were decided (``controller/campaign/promotion.py: decide``)."""

    budget_at_search_stop: dict[str, Any] | None = None
    plan: list[PlanCandidate] | None = None
    promotion: dict[str, Any] | None = None


def scope_or_none(c: Any) -> Scope | None:
    """The campaign's :class:`Scope`, None before ``init`` locked it."""
    return Scope.load(c.scope) if c.scope else None


def doctor_or_none(c: Any) -> Doctor | None:
    """The campaign's :class:`Doctor`, None before the doctor finished."""
    return Doctor.load(c.doctor) if c.doctor else None


def scope_of(c: Any) -> Scope:
    """The campaign's :class:`Scope`; a one-line StoreError before ``init`` locked it."""
    s = scope_or_none(c)
    if s is None:
        raise StoreError(f"campaign {c.id} has no scope yet (state {c.state})")
    return s


def doctor_of(c: Any) -> Doctor:
    """The campaign's :class:`Doctor`; a one-line StoreError before the doctor finished."""
    d = doctor_or_none(c)
    if d is None:
        raise StoreError(f"campaign {c.id} has no doctor record yet (state {c.state})")
    return d


def result_of(c: Any) -> Result:
    """The campaign's :class:`Result` (empty before the search stopped)."""
    return Result.load(c.result) if c.result else Result()


def as_scope(scope: Scope | Mapping[str, Any]) -> Scope:
    """``scope`` as a :class:`Scope` (a stored dict is loaded and checked like a stored row)."""
    return scope if isinstance(scope, Scope) else Scope.load(scope)


def as_doctor(doctor: Doctor | Mapping[str, Any]) -> Doctor:
    """``doctor`` as a :class:`Doctor` (a stored dict is loaded and checked like a stored row)."""
    return doctor if isinstance(doctor, Doctor) else Doctor.load(doctor)


def stored_judge_spec(scope: Mapping[str, Any] | None, doctor: Mapping[str, Any] | None) -> dict[str, Any]:
    """The judge spec re-judging a stored receipt uses: the scope's ``judge_spec`` with the doctor's
    ``sigma_pair`` (both stores' ``list_receipts``; ``{}`` before ``init``)."""
    spec = dict(Scope.load(scope).judge_spec) if scope else {}
    if doctor:
        spec.setdefault("sigma_pair", Doctor.load(doctor).sigma_pair)
    return spec
