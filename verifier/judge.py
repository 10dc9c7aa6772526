"""The five-layer judge: run the 17 invariants (the paper's 16 plus ``executor_clock``) on a trial receipt
against reference receipts.

Pure functions, no I/O.  Public API (the controller calls these):

* :func:`judge` -> :class:`~infrarsi.verifier.spec.Verdict`
* :func:`speed_reproduces`, :func:`window_step_times`, :func:`window_mean_step_time`
* :func:`rejudge` -> counts by first failed layer and by invariant (the paper's Table 2)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from infrarsi.verifier import invariants as inv
from infrarsi.verifier import trust
from infrarsi.verifier.invariants import speed_reproduces, window_mean_step_time, window_step_times
from infrarsi.verifier.receipt import Receipt, ReceiptError, load_receipt
from infrarsi.verifier.spec import LAYERS, Item, JudgeSpec, SpecError, Verdict, integrity_verdict

__all__ = [
    "JudgeSpec", "Verdict", "Item", "judge", "speed_reproduces", "window_step_times",
    "window_mean_step_time", "rejudge", "RejudgeCounts", "judge_raw",
]

#: the paper's 16 invariants (its Table 8) in table order
PAPER_INVARIANTS: tuple[tuple[str, str], ...] = (
    ("L1", "completes"), ("L1", "no_errors"), ("L1", "memory_cap"),
    ("L2", "same_workload"), ("L2", "same_data"), ("L2", "same_model"), ("L2", "frozen_files"),
    ("L3", "optimizer_steps"),
    ("L4", "loss_within_tolerance"), ("L4", "grad_norm_within_tol"), ("L4", "eval_matches"), ("L4", "precision"),
    ("L5", "timing_consistent"), ("L5", "speed_reproduces"), ("L5", "resume_continues"), ("L5", "user_tests"),
)
#: every invariant judge() reports, in order: the paper's 16, then the executor's independent clock, then the
#: final-parameter checksum (L4 params_match, docs/verifier.md "Numerics")
INVARIANTS: tuple[tuple[str, str], ...] = PAPER_INVARIANTS + (("L5", "executor_clock"), ("L4", "params_match"))
#: ``(start, end)`` unix seconds as the executor saw the trial run (either may be None: unknown)
ExecutorWindow = tuple["float | None", "float | None"]


def judge(
    trial: Receipt,
    references: list[Receipt],
    spec: JudgeSpec,
    *,
    rerun_times: tuple[list[float], list[float]] | None = None,
    user_test_codes: dict[str, int] | None = None,
    executor_window: ExecutorWindow | None = None,
) -> Verdict:
    """Judge ``trial`` against ``references`` (repeats of the untouched reference) under ``spec``.

    ``rerun_times`` = (reference re-run window step times, candidate re-run window step
    times) makes this a promotion judgement: ``speed_reproduces`` becomes required and
    uses ``spec.margin``.  ``user_test_codes`` maps test command -> exit code.
    ``executor_window`` = (start, end) unix seconds from the executor (outside the trial);
    without it ``executor_clock`` is unchecked and not required.
    Returns a :class:`Verdict` with every item of :data:`INVARIANTS`, in that order.
    """
    refs = list(references)
    data = inv.same_data(trial, refs, spec)
    proven = data.status == "pass"
    items: list[Item] = [
        inv.completes(trial, refs, spec),
        inv.no_errors(trial, refs, spec),
        inv.memory_cap(trial, refs, spec),
        inv.same_workload(trial, refs, spec),
        data,
        inv.same_model(trial, refs, spec),
        inv.frozen_files(trial, refs, spec),
        inv.optimizer_steps(trial, refs, spec),
        inv.loss_within_tolerance(trial, refs, spec, data_order_verified=proven),
        inv.grad_norm_within_tol(trial, refs, spec, first_batch_proven=proven and not spec.equivalent_data_order),
        inv.eval_matches(trial, refs, spec),
        inv.precision(trial, refs, spec),
        inv.timing_consistent(trial, refs, spec),
    ]
    if rerun_times is not None:
        margin = spec.margin
        if margin is None:
            items.append(Item("speed_reproduces", "L5", "unchecked", "no sigma_pair or promotion_margin in the spec"))
        else:
            items.append(speed_reproduces(rerun_times[0], rerun_times[1], margin))
    else:
        items.append(Item("speed_reproduces", "L5", "unchecked", "not a promotion judgement", required=False))
    items.append(inv.resume_continues(trial, refs, spec))
    items.append(inv.user_tests(user_test_codes, spec.check_user_tests))
    items.append(trust.executor_clock(trial, executor_window))
    items.append(inv.params_match(trial, refs, spec))
    return Verdict.of(items)


def judge_raw(
    trial_raw: bytes, reference_raws: list[bytes], spec: JudgeSpec, master_key: bytes, trial_id: str,
    executor_window: ExecutorWindow | None = None,
) -> Verdict:
    """Load (size cap, signature, schema, replay checks) and judge; an untrustworthy trial gets an L0 verdict.

    A reference that fails to load raises :class:`ReceiptError` (that is an
    operator problem, not the candidate's).  ``executor_window`` as in :func:`judge`.
    """
    refs = [load_receipt(r, master_key, None) for r in reference_raws]
    try:
        trial = load_receipt(trial_raw, master_key, trial_id)
    except ReceiptError as exc:
        return integrity_verdict(str(exc))
    return judge(trial, refs, spec, executor_window=executor_window)


@dataclass
class RejudgeCounts:
    """Offline re-verification ledger: totals, primary (first failed layer) and triggers per invariant."""

    total: int = 0
    accepted: int = 0
    by_layer: Counter = field(default_factory=Counter)
    by_invariant: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    @property
    def rejected(self) -> int:
        """Executions rejected (any layer, L0 included)."""
        return self.total - self.accepted

    def to_json(self) -> dict:
        """JSON-ready dict."""
        return {"total": self.total, "accepted": self.accepted, "rejected": self.rejected,
                "by_layer": {k: self.by_layer[k] for k in LAYERS if self.by_layer[k]},
                "by_invariant": dict(self.by_invariant), "errors": list(self.errors)}

    def table(self) -> str:
        """Aligned text: one row per invariant with triggers and primary counts (like the paper's Table 2)."""
        rows = [("layer", "invariant", "triggers", "primary")]
        firsts: Counter = Counter()
        for layer, name in (("L0", "signature"),) + INVARIANTS:
            rows.append((layer, name, str(self.by_invariant.get(name, 0)), ""))
        for layer in LAYERS:
            firsts[layer] = self.by_layer.get(layer, 0)
        rows += [(layer, "(first failed layer)", "", str(firsts[layer])) for layer in LAYERS]
        width = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(c.ljust(width[i]) for i, c in enumerate(r)).rstrip() for r in rows]
        lines.append(f"total {self.total}: {self.accepted} valid, {self.rejected} rejected "
                     f"({len(INVARIANTS)} invariants and the L0 signature check)")
        return "\n".join(lines)


def rejudge(
    entries: Iterable[tuple[Any, ...]], master_key: bytes
) -> RejudgeCounts:
    """Re-judge stored executions: each entry is (trial_id, receipt bytes, reference receipt bytes, judge spec dict)
    or the same with a fifth element, the executor's (start, end) window, so ``executor_clock`` is re-checked.

    Entries whose references or spec cannot be loaded are counted in ``errors``
    (one line each) and not in the totals.
    """
    counts = RejudgeCounts()
    for entry in entries:
        trial_id, raw, ref_raws, spec_dict = entry[:4]
        window = entry[4] if len(entry) > 4 else None
        try:
            spec = JudgeSpec.from_dict(spec_dict)
            verdict = judge_raw(raw, ref_raws, spec, master_key, trial_id, executor_window=window)
        except (SpecError, ReceiptError) as exc:
            counts.errors.append(f"{trial_id}: {exc}")
            continue
        counts.total += 1
        if verdict.accepted:
            counts.accepted += 1
            continue
        counts.by_layer[verdict.first_failed_layer] += 1
        for it in verdict.rejecting:
            counts.by_invariant[it.name] += 1
    return counts
