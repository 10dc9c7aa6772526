"""Judging contract (:class:`JudgeSpec`) and results (:class:`Item`, :class:`Verdict`).

Pure data: no I/O.  Status values: ``pass``, ``fail``, ``unchecked``, ``info``.  A
verdict rejects when any *required* item is ``fail`` or ``unchecked``; the first
failed layer is the lowest layer holding such an item (``L0`` is receipt integrity:
signature, schema, replay).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

LAYERS = ("L0", "L1", "L2", "L3", "L4", "L5")
STATUSES = ("pass", "fail", "unchecked", "info")


class SpecError(ValueError):
    """A JudgeSpec dictionary is malformed; the message names the field."""


@dataclass(frozen=True)
class JudgeSpec:
    """The contract facts the judge needs, fixed before the search starts.

    ``window`` is (start, end), 1-based inclusive update indices of the timed and
    loss-compared window.  ``frozen_manifest`` maps relpath -> sha256 (empty: use the
    manifest recorded by the wrapper).  ``static_invariants`` names header ``extra``
    keys that must equal the reference's.  ``equivalent_data_order``: the contract
    declares a permuted data order equivalent, so ``same_data`` compares the multiset of
    per-update digests and L4 uses the window mean (the order is not verified).
    ``promotion_margin`` is used when re-run times are given; without it the margin comes from ``sigma_pair``
    through the campaign's own bound (:mod:`infrarsi.verifier.speed`): its 90% upper confidence bound for
    ``sigma_dof`` degrees of freedom (when given), floored at ``MIN_SIGMA_PAIR``, then exp(2 * bound) - 1.
    """

    updates: int
    window: tuple[int, int]
    tokens_per_update: int | None = None
    seq_len: int | None = None
    tau: float = 0.03
    tau_eval: float = 0.03
    timing_tol: float = 0.03
    memory_cap_gib: float | None = None
    precision_menu: tuple[str, ...] = ()
    frozen_manifest: dict[str, str] = field(default_factory=dict)
    static_invariants: tuple[str, ...] = ()
    equivalent_data_order: bool = False
    sigma_pair: float | None = None
    sigma_dof: int | None = None
    promotion_margin: float | None = None
    check_eval: bool = False
    check_resume: bool = False
    check_user_tests: bool = False

    def __post_init__(self) -> None:
        s, e = self.window
        if not (1 <= s <= e <= self.updates):
            raise SpecError(f"window: ({s}, {e}) must satisfy 1 <= start <= end <= updates={self.updates}")
        if self.tau <= 0:
            raise SpecError(f"tau: must be > 0, got {self.tau}")

    @property
    def margin(self) -> float | None:
        """The promotion margin: explicit, or from ``sigma_pair`` as the campaign gate computes it, or None.

        A point estimate of sigma_pair from a few runs understates the noise (two reference runs gave 0.09% where
        re-runs moved by 1%), so the margin uses the upper confidence bound for ``sigma_dof`` and the documented
        floor, exactly like :func:`infrarsi.verifier.speed.pool_noise`."""
        from infrarsi.verifier import speed

        if self.promotion_margin is not None:
            return self.promotion_margin
        if self.sigma_pair is not None:
            sigma = float(self.sigma_pair)
            if self.sigma_dof:
                sigma = speed.sigma_ucb(sigma, int(self.sigma_dof))
            return speed.margin_of(max(sigma, speed.MIN_SIGMA_PAIR))
        return None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "JudgeSpec":
        """Build from a JSON-style dict; raises :class:`SpecError` naming an unknown or bad field."""
        if not isinstance(d, dict):
            raise SpecError("judge spec: not a mapping")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise SpecError(f"judge spec: unknown field {unknown[0]!r}")
        kw = dict(d)
        try:
            if "window" in kw:
                kw["window"] = (int(kw["window"][0]), int(kw["window"][1]))
            for name in ("precision_menu", "static_invariants"):
                if name in kw:
                    kw[name] = tuple(str(x) for x in kw[name])
            if "frozen_manifest" in kw:
                kw["frozen_manifest"] = {str(k): str(v) for k, v in dict(kw["frozen_manifest"]).items()}
            if "updates" in kw:
                kw["updates"] = int(kw["updates"])
            return cls(**kw)
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            if isinstance(exc, SpecError):
                raise
            raise SpecError(f"judge spec: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict that :meth:`from_dict` accepts."""
        d = asdict(self)
        d["window"] = list(self.window)
        d["precision_menu"] = list(self.precision_menu)
        d["static_invariants"] = list(self.static_invariants)
        return d


@dataclass(frozen=True)
class Item:
    """One invariant's outcome: ``status`` in STATUSES, a one-line ``reason``."""

    name: str
    layer: str
    status: str
    reason: str
    required: bool = True

    @property
    def rejects(self) -> bool:
        """True when this item alone rejects the trial."""
        return self.required and self.status in ("fail", "unchecked")


@dataclass(frozen=True)
class Verdict:
    """The judge's decision: ``accepted``, the ``first_failed_layer`` and every item."""

    accepted: bool
    first_failed_layer: str | None
    items: list[Item]

    @classmethod
    def of(cls, items: list[Item]) -> "Verdict":
        """Derive acceptance and the first failed layer from ``items``."""
        bad = [it for it in items if it.rejects]
        first = min((it.layer for it in bad), key=LAYERS.index) if bad else None
        return cls(accepted=not bad, first_failed_layer=first, items=list(items))

    @property
    def rejecting(self) -> list[Item]:
        """Items that reject, in layer order."""
        return sorted((it for it in self.items if it.rejects), key=lambda it: LAYERS.index(it.layer))

    @property
    def first_failed(self) -> Item | None:
        """The first rejecting item (lowest layer, then table order), or None."""
        r = self.rejecting
        return r[0] if r else None

    def summary(self) -> str:
        """One line: ``accepted`` or ``rejected at L2 same_data: <reason>``."""
        it = self.first_failed
        if it is None:
            return "accepted"
        return f"rejected at {it.layer} {it.name}: {it.reason}"

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict of the verdict."""
        return {
            "accepted": self.accepted,
            "first_failed_layer": self.first_failed_layer,
            "summary": self.summary(),
            "items": [asdict(it) for it in self.items],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Verdict":
        """Inverse of :meth:`to_json`."""
        items = [Item(**{k: v for k, v in it.items()}) for it in d["items"]]
        return cls(accepted=bool(d["accepted"]), first_failed_layer=d.get("first_failed_layer"), items=items)


def integrity_verdict(reason: str) -> Verdict:
    """The verdict for a receipt that failed to load (unsigned, bad signature, wrong schema, replayed)."""
    return Verdict.of([Item("signature", "L0", "fail", reason, True)])
