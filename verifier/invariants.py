"""The paper's 16 invariants of the five-layer verifier, one small pure function each (the 17th,
``executor_clock``, lives in :mod:`infrarsi.verifier.trust`).

Every function takes the trial :class:`~infrarsi.verifier.receipt.Receipt`, the reference
receipts (one or more repeats of the untouched reference) and the
:class:`~infrarsi.verifier.spec.JudgeSpec`, and returns an :class:`~infrarsi.verifier.spec.Item`.
They never raise on odd receipts: what cannot be established is ``unchecked``.
Predicates follow Table 8 of the InfraRSI paper (docs/verifier.md lists them).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from infrarsi.verifier import numerics as nm
from infrarsi.verifier import speed
from infrarsi.verifier.receipt import Receipt, num
from infrarsi.verifier.spec import Item, JudgeSpec
from infrarsi.verifier.trust import limits_note, limits_problem

Refs = Sequence[Receipt]
FATAL_KINDS = ("oom", "cuda", "traceback")
FROZEN_RUN = 4  # this many identical consecutive values count as a frozen series


def _rel(a: float, b: float) -> float:
    """Relative deviation |a-b|/|b| (inf when b == 0 and a != b)."""
    if a == b:
        return 0.0
    return abs(a - b) / abs(b) if b != 0 else math.inf


def _series(r: Receipt, key: str) -> list[Any]:
    return [u.get(key) for u in r.updates]


def _longest_run(values: list[float]) -> int:
    best = cur = 1 if values else 0
    for a, b in zip(values, values[1:]):
        cur = cur + 1 if a == b else 1
        best = max(best, cur)
    return best


# ---------------------------------------------------------------- L1 ----------
def completes(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """Within the wrapper's limits (:func:`infrarsi.verifier.trust.limits_problem`), exit code 0, no signal,
    no timeout, N_done == N_tgt updates, and a footer agreeing with them."""
    over = limits_problem(trial, spec)
    if over is not None:
        return Item("completes", "L1", "fail", over)
    w = trial.wrapper
    n = len(trial.updates)
    if w.get("timed_out"):
        return Item("completes", "L1", "fail", f"timed out after {n}/{spec.updates} updates")
    if w.get("signal"):
        return Item("completes", "L1", "fail", f"killed by signal {w.get('signal')} after {n}/{spec.updates} updates")
    if w.get("exit_code") != 0:
        return Item("completes", "L1", "fail", f"exit code {w.get('exit_code')} after {n}/{spec.updates} updates")
    if n != spec.updates:
        return Item("completes", "L1", "fail", f"{n} updates ran, {spec.updates} requested")
    if trial.footer is None:
        return Item("completes", "L1", "fail", "no footer: the job did not reach its end")
    done = trial.footer.get("completed")
    if done != n:
        return Item("completes", "L1", "fail", f"footer says {done} completed, {n} update lines received")
    return Item("completes", "L1", "pass", f"exit 0, {n}/{spec.updates} updates{limits_note(trial)}")


def no_errors(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """No NaN/Inf loss, no OOM/CUDA/traceback line, no NCCL line before the last update of a clean exit,
    loss and gradient norm not frozen (FROZEN_RUN identical consecutive values)."""
    losses = [num(v) for v in _series(trial, "loss")]
    for i, v in enumerate(losses, 1):
        if not math.isfinite(v):
            return Item("no_errors", "L1", "fail", f"non-finite loss {v} at update {i}")
    grads = [num(v) for v in _series(trial, "grad_norm")]
    for i, v in enumerate(grads, 1):
        if not math.isfinite(v):
            return Item("no_errors", "L1", "fail", f"non-finite gradient norm {v} at update {i}")
    w = trial.wrapper
    clean = w.get("exit_code") == 0 and not w.get("signal") and not w.get("timed_out")
    last_t = num(trial.updates[-1].get("wall_t")) if trial.updates else math.inf
    reported = 0
    for e in w.get("errors") or []:
        kind = e.get("kind")
        if kind in FATAL_KINDS:
            return Item("no_errors", "L1", "fail", f"{kind} line: {str(e.get('line', ''))[:120]}")
        if kind == "nccl":
            after_last = clean and len(trial.updates) == spec.updates and e.get("after_updates", 0) >= spec.updates \
                and num(e.get("t")) >= last_t
            if not after_last:
                return Item("no_errors", "L1", "fail", f"nccl line: {str(e.get('line', ''))[:120]}")
            reported += 1
    if len(losses) >= FROZEN_RUN and _longest_run(losses) >= FROZEN_RUN:
        return Item("no_errors", "L1", "fail", f"loss frozen: {_longest_run(losses)} identical consecutive values")
    if len(grads) >= FROZEN_RUN and _longest_run(grads) >= FROZEN_RUN:
        return Item("no_errors", "L1", "fail", f"gradient norm frozen: {_longest_run(grads)} identical consecutive values")
    extra = f"; {reported} collective line(s) after the last update reported" if reported else ""
    return Item("no_errors", "L1", "pass", f"no error lines, losses finite and moving{extra}")


def memory_cap(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """Peak reported memory <= the cap (spec, else the wrapper's recorded cap)."""
    cap = spec.memory_cap_gib if spec.memory_cap_gib is not None else trial.wrapper.get("memory_cap_gib")
    peaks = [num(v) for v in _series(trial, "peak_mem_gib") if v is not None]
    ref_has = any(u.get("peak_mem_gib") is not None for r in refs for u in r.updates)
    if cap is None:
        return Item("memory_cap", "L1", "info", "no memory cap declared")
    if not peaks:
        if ref_has:
            return Item("memory_cap", "L1", "fail", "peak memory no longer reported (the reference reported it)")
        return Item("memory_cap", "L1", "info", f"no peak memory reported; cap {cap:g} GiB not checkable")
    peak = max(peaks)
    if not peak <= float(cap):
        return Item("memory_cap", "L1", "fail", f"peak {peak:.3f} GiB > cap {float(cap):g} GiB")
    return Item("memory_cap", "L1", "pass", f"peak {peak:.3f} GiB <= cap {float(cap):g} GiB")


# ---------------------------------------------------------------- L2 ----------
def same_workload(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """Tokens (or samples) per update and sequence length equal the reference's/spec's at every update,
    and every declared static invariant in the header ``extra`` is unchanged."""
    ref = refs[0] if refs else None
    if not trial.updates:
        return Item("same_workload", "L2", "unchecked", "no update lines to verify the workload")
    for i, u in enumerate(trial.updates, 1):
        tokens, samples, seq = u.get("tokens"), u.get("samples"), u.get("seq_len")
        ru = ref.updates[i - 1] if ref is not None and i <= len(ref.updates) else {}
        want_tokens = spec.tokens_per_update if spec.tokens_per_update is not None else ru.get("tokens")
        want_seq = spec.seq_len if spec.seq_len is not None else ru.get("seq_len")
        if want_tokens is None and ru.get("samples") is None:
            return Item("same_workload", "L2", "unchecked", "neither tokens nor samples per update declared or referenced")
        if want_tokens is not None:
            if tokens is None:
                return Item("same_workload", "L2", "unchecked", f"update {i} reports no token count")
            if tokens != want_tokens:
                return Item("same_workload", "L2", "fail", f"update {i}: {tokens} tokens, expected {want_tokens}")
        elif samples != ru.get("samples"):
            return Item("same_workload", "L2", "fail", f"update {i}: {samples} samples, expected {ru.get('samples')}")
        if want_seq is not None and seq != want_seq:
            return Item("same_workload", "L2", "fail", f"update {i}: sequence length {seq}, expected {want_seq}")
    h, rh = trial.header or {}, (ref.header if ref is not None else None) or {}
    if spec.seq_len is not None and h.get("seq_len") not in (None, spec.seq_len):
        return Item("same_workload", "L2", "fail", f"header sequence length {h.get('seq_len')}, expected {spec.seq_len}")
    if spec.tokens_per_update is not None and h.get("tokens_per_update") not in (None, spec.tokens_per_update):
        return Item("same_workload", "L2", "fail",
                    f"header tokens per update {h.get('tokens_per_update')}, expected {spec.tokens_per_update}")
    for key in spec.static_invariants:
        want = (rh.get("extra") or {}).get(key)
        got = (h.get("extra") or {}).get(key)
        if want is None:
            return Item("same_workload", "L2", "unchecked", f"static invariant {key!r} not reported by the reference")
        if got != want:
            return Item("same_workload", "L2", "fail", f"static invariant {key!r} = {got!r}, reference {want!r}")
    return Item("same_workload", "L2", "pass", f"{len(trial.updates)} updates match tokens/sequence length")


def same_data(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """Per-update data digests equal the reference's (as a multiset when ``equivalent_data_order``)."""
    ref = refs[0] if refs else None
    rd = [u.get("batch_digest") for u in ref.updates] if ref is not None else []
    if not rd or not all(rd):
        return Item("same_data", "L2", "unchecked", "the reference logs no data digests", required=False)
    td = [u.get("batch_digest") for u in trial.updates]
    if not td:
        return Item("same_data", "L2", "unchecked", "no update lines carry a data digest")
    if not all(td):
        return Item("same_data", "L2", "fail", "data digest no longer reported (the reference reported it)")
    if spec.equivalent_data_order:
        pool = list(rd)
        for i, d in enumerate(td, 1):
            if d not in pool:
                return Item("same_data", "L2", "fail", f"update {i}: batch digest {d} not in the reference's data")
            pool.remove(d)
        return Item("same_data", "L2", "pass", f"{len(td)} batches from the reference's data (order may differ)")
    for i, (a, b) in enumerate(zip(td, rd), 1):
        if a != b:
            return Item("same_data", "L2", "fail", f"update {i}: batch digest {a} != reference {b}")
    return Item("same_data", "L2", "pass", f"{min(len(td), len(rd))} batch digests equal the reference's, in order")


_MODEL_KEYS_SKIP = {"versions", "extra", "wall_t"}


def same_model(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """Model digest and trainable-parameter count equal the reference's; no header key the reference reported is dropped."""
    rh = refs[0].header if refs else None
    h = trial.header
    if rh is None:
        return Item("same_model", "L2", "unchecked", "the reference has no header")
    if h is None:
        return Item("same_model", "L2", "fail", "no header: model digest no longer reported")
    for key, val in rh.items():
        if key in _MODEL_KEYS_SKIP or val in (None, ""):
            continue
        if h.get(key) in (None, ""):
            return Item("same_model", "L2", "fail", f"header key {key!r} no longer reported")
    if not rh.get("model_digest"):
        return Item("same_model", "L2", "unchecked", "the reference reports no model digest")
    if h.get("model_digest") != rh.get("model_digest"):
        return Item("same_model", "L2", "fail",
                    f"model digest {str(h.get('model_digest'))[:12]} != reference {str(rh.get('model_digest'))[:12]}")
    if h.get("params") != rh.get("params"):
        return Item("same_model", "L2", "fail", f"{h.get('params')} trainable parameters, reference {rh.get('params')}")
    return Item("same_model", "L2", "pass", f"digest {str(h.get('model_digest'))[:12]}, {h.get('params')} parameters")


def frozen_files(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """Every frozen file hashes to its declared SHA-256 before and after the run."""
    w = trial.wrapper
    manifest = spec.frozen_manifest or (w.get("frozen_manifest") or {})
    if not manifest:
        return Item("frozen_files", "L2", "pass", "no frozen files declared")
    before, after = w.get("frozen_before") or {}, w.get("frozen_after") or {}
    for rel, want in sorted(manifest.items()):
        if rel not in after or rel not in before:
            return Item("frozen_files", "L2", "unchecked", f"{rel}: not hashed by the wrapper")
        if before[rel] != want:
            return Item("frozen_files", "L2", "fail", f"{rel}: changed before the run started")
        if after[rel] != want:
            return Item("frozen_files", "L2", "fail", f"{rel}: changed during the run")
    return Item("frozen_files", "L2", "pass", f"{len(manifest)} frozen file(s) unchanged")


# ---------------------------------------------------------------- L3 ----------
def optimizer_steps(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """The optimizer-step counter and learning rate equal the reference's at every update.

    With only a learning-rate proxy (no counter), an equal schedule is unchecked
    and a different one fails.
    """
    if not refs or not refs[0].updates:
        return Item("optimizer_steps", "L3", "unchecked", "the reference has no updates")
    ref = refs[0]
    n = min(len(trial.updates), len(ref.updates))
    if n == 0:
        return Item("optimizer_steps", "L3", "unchecked", "no updates to compare")
    has_counter = all(u.get("opt_step") is not None for u in trial.updates[:n] + ref.updates[:n])
    for i in range(n):
        u, r = trial.updates[i], ref.updates[i]
        if has_counter and u.get("opt_step") != r.get("opt_step"):
            return Item("optimizer_steps", "L3", "fail",
                        f"update {i + 1}: optimizer step {u.get('opt_step')}, reference {r.get('opt_step')}")
        lr, rlr = u.get("lr"), r.get("lr")
        if lr is not None and rlr is not None and _rel(num(lr), num(rlr)) > 1e-6:
            return Item("optimizer_steps", "L3", "fail", f"update {i + 1}: learning rate {num(lr):.6g}, reference {num(rlr):.6g}")
    if not has_counter:
        return Item("optimizer_steps", "L3", "unchecked", "no optimizer-step counter; learning-rate schedule equal")
    return Item("optimizer_steps", "L3", "pass", f"{n} optimizer steps and learning rates match")


# ---------------------------------------------------------------- L4 ----------
# The comparisons and their calibrated tolerances live in infrarsi.verifier.numerics (docs/verifier.md, "Numerics").
def _curve(r: Receipt, key: str) -> list[float]:
    return [num(u.get(key)) for u in r.updates]


def _window_losses(r: Receipt, window: tuple[int, int]) -> list[float]:
    s, e = window
    return [num(u.get("loss")) for u in r.updates[s - 1:e]]


def _klass(trial: Receipt, refs: Refs) -> str | None:
    """The precision class the trial is compared in: the lower of its and the reference's precision."""
    rp = refs[0].header.get("precision") if refs and refs[0].header else None
    return nm.comparison_class((trial.header or {}).get("precision"), rp)


def _end_klass(trial: Receipt, refs: Refs, spec: JudgeSpec) -> str | None:
    """The class for end-of-run values: none (the cap alone) when the contract declares the data order free,
    since another order legitimately ends at other parameters."""
    return None if spec.equivalent_data_order else _klass(trial, refs)


def loss_sigma(refs: Refs, window: tuple[int, int]) -> tuple[float, float]:
    """(sigma_l, largest per-update relative disagreement) of the reference repeats in the window.

    sigma_l is the per-run relative loss noise from every pair of repeats (see
    :func:`infrarsi.verifier.numerics.repeat_sigma`); NaN with a single repeat.
    """
    sigma, worst = nm.repeat_sigma([_window_losses(r, window) for r in refs])
    return (math.nan if sigma is None else sigma), worst


def _compare_series(name: str, key: str, label: str, trial: Receipt, refs: Refs, spec: JudgeSpec,
                    per_update: bool) -> tuple[str, str]:
    """(status, reason) of one per-update series against the reference repeats (see numerics.compare_curve)."""
    curves = [_curve(r, key) for r in refs]
    sigma, _ = nm.repeat_sigma(curves)
    tol = nm.calibrate(name, _klass(trial, refs), sigma, nm.cap_for(name, spec.tau, spec.tau_eval))
    res = nm.compare_curve(label, _curve(trial, key), curves, tol, spec.window, per_update=per_update)
    return ("pass" if res.ok else "fail"), res.message


def loss_within_tolerance(trial: Receipt, refs: Refs, spec: JudgeSpec, data_order_verified: bool = False) -> Item:
    """Every update's loss within the calibrated tolerance of the reference repeats' mean (data order verified).

    Tolerance = min(tau, max(K_SIGMA * sigma_repeats, floor[precision class])).  Without a
    verified order (``equivalent_data_order`` or no digests), or when the repeats disagree beyond
    tau, the window mean is compared at tau (widened to 3 sigma sqrt(2/k) for noisy repeats).
    """
    if not refs or not all(r.updates for r in refs):
        return Item("loss_within_tolerance", "L4", "unchecked", "no reference losses")
    if not trial.updates:
        return Item("loss_within_tolerance", "L4", "unchecked", "no update lines")
    per_update = data_order_verified and not spec.equivalent_data_order
    status, msg = _compare_series("loss", "loss", "loss", trial, refs, spec, per_update)
    return Item("loss_within_tolerance", "L4", status, msg)


def grad_norm_within_tol(trial: Receipt, refs: Refs, spec: JudgeSpec, first_batch_proven: bool = False) -> Item:
    """Every update's gradient norm within the calibrated tolerance of the reference repeats' mean.

    A veto only when the data order is proven equal (``first_batch_proven``: same_data passed in
    order); otherwise the window mean is reported (info).  Cap: GRAD_NORM_CAP_FACTOR * tau.
    """
    if not refs or not trial.updates or not all(r.updates for r in refs):
        return Item("grad_norm_within_tol", "L4", "unchecked", "no gradient norms to compare",
                    required=first_batch_proven)
    if not first_batch_proven:
        _, msg = _compare_series("grad_norm", "grad_norm", "gradient norm", trial, refs, spec, per_update=False)
        return Item("grad_norm_within_tol", "L4", "info", msg + "; report only, data order not proven", required=False)
    status, msg = _compare_series("grad_norm", "grad_norm", "gradient norm", trial, refs, spec, per_update=True)
    return Item("grad_norm_within_tol", "L4", status, msg)


def _footer_extra(r: Receipt, key: str) -> float | None:
    v = ((r.footer or {}).get("extra") or {}).get(key)
    return None if v is None else num(v)


def _conditional_compare(name: str, key: str, active: bool, tau: float, trial: Receipt, refs: Refs) -> Item:
    layer = "L4" if name == "eval_matches" else "L5"
    if not active:
        return Item(name, layer, "unchecked", "not configured", required=False)
    ref_vals = [_footer_extra(r, key) for r in refs]
    got = _footer_extra(trial, key)
    if got is None or not ref_vals or any(v is None for v in ref_vals):
        return Item(name, layer, "unchecked", f"{key!r} missing from the footer")
    want = statistics.fmean(v for v in ref_vals if v is not None)
    dev = _rel(got, want)
    ok = math.isfinite(got) and dev <= tau
    return Item(name, layer, "pass" if ok else "fail", f"{key} {got:.5g} vs reference {want:.5g} ({dev:.2%}, tau {tau:.2%})")


def eval_matches(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """The footer's ``eval`` (held-out loss after the last update) within the calibrated tolerance of the references'.

    Active when ``spec.check_eval`` or when every reference footer carries ``eval``; then a
    trial that stops reporting it fails.  Tolerance: min(tau_eval, max(K_SIGMA * sigma, floor)).
    """
    ref_vals = [_footer_extra(r, "eval") for r in refs]
    have = bool(refs) and all(v is not None for v in ref_vals)
    if not have:
        if spec.check_eval:
            return Item("eval_matches", "L4", "unchecked", "'eval' missing from the reference footer")
        return Item("eval_matches", "L4", "unchecked", "the reference reports no eval loss", required=False)
    got = _footer_extra(trial, "eval")
    if got is None:
        return Item("eval_matches", "L4", "fail", "eval loss no longer reported (the reference reported it)")
    vals = [float(v) for v in ref_vals if v is not None]
    want = math.fsum(vals) / len(vals)
    tol = nm.calibrate("eval", _end_klass(trial, refs, spec), nm.scalar_sigma(vals),
                       nm.cap_for("eval", spec.tau, spec.tau_eval))
    dev = nm.rel(got, want)
    ok = dev <= tol.value
    return Item("eval_matches", "L4", "pass" if ok else "fail",
                f"eval loss {got:.6g} vs reference {want:.6g}: deviation {dev:.3%} {'<=' if ok else '>'} {tol.describe()}")


def _norms(r: Receipt) -> dict[str, float] | None:
    v = ((r.footer or {}).get("extra") or {}).get("param_norms")
    if isinstance(v, list):
        v = {str(i): x for i, x in enumerate(v)}
    if not isinstance(v, dict) or not v:
        return None
    try:
        return {str(k): num(x) for k, x in v.items()}
    except (TypeError, ValueError):
        return None


def params_match(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """(Checksum of the final parameters) the footer's ``param_norms`` match the reference repeats' mean.

    Deviation = ||n_trial - n_ref||_2 / ||n_ref||_2 over the per-tensor L2 norms (a dict
    name -> norm, or a list); tolerance min(tau, max(K_SIGMA * sigma, floor)).  Active when every
    reference reports the norms; then a trial that drops them or reports other tensors fails.
    """
    ref_norms = [_norms(r) for r in refs]
    if not refs or any(n is None for n in ref_norms):
        return Item("params_match", "L4", "unchecked", "the reference reports no parameter norms", required=False)
    rn = [n for n in ref_norms if n is not None]
    got = _norms(trial)
    if got is None:
        return Item("params_match", "L4", "fail", "parameter norms no longer reported (the reference reported them)")
    want = nm.mean_norms(rn)
    if set(got) != set(want):
        diff = sorted(set(got) ^ set(want))
        return Item("params_match", "L4", "fail",
                    f"{len(diff)} parameter tensor(s) differ from the reference's, first {diff[0]!r}")
    tol = nm.calibrate("params", _end_klass(trial, refs, spec), nm.norms_sigma(rn),
                       nm.cap_for("params", spec.tau, spec.tau_eval))
    dev = nm.norms_deviation(got, want)
    ok = dev <= tol.value
    return Item("params_match", "L4", "pass" if ok else "fail",
                f"final parameter norms ({len(want)} tensors) deviate {dev:.3%} {'<=' if ok else '>'} {tol.describe()}")


def precision(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """Reported precision compared with the reference's (informational); outside the declared menu fails.

    The numerical checks above compare in the lower precision class of the two.
    """
    p = (trial.header or {}).get("precision")
    rp = refs[0].header.get("precision") if refs and refs[0].header else None
    if spec.precision_menu and p not in spec.precision_menu:
        return Item("precision", "L4", "fail", f"precision {p!r} outside the menu {list(spec.precision_menu)}")
    klass = _klass(trial, refs)
    if p != rp:
        return Item("precision", "L4", "info", f"precision {p!r}, reference {rp!r}: compared as {klass or 'unknown'}",
                    required=False)
    return Item("precision", "L4", "pass", f"precision {p!r} as the reference", required=False)


# ---------------------------------------------------------------- L5 ----------
def window_step_times(receipt: Receipt, window: tuple[int, int]) -> list[float]:
    """Per-update step times inside the window from the wrapper's clock (``wall_t`` differences).

    Update i's time is ``wall_t[i] - wall_t[i-1]`` (the header's ``wall_t`` for i = 1).
    Updates without a stamp are skipped.
    """
    return [gap for _, gap in _stamp_gaps(receipt, window)]


def _stamp_gaps(receipt: Receipt, window: tuple[int, int]) -> list[tuple[int, float]]:
    """(update i, ``wall_t[i] - wall_t[i-1]``) for every update in the window whose two stamps exist."""
    s, e = window
    stamps: list[float | None] = [receipt.header.get("wall_t") if receipt.header else None]
    stamps += [u.get("wall_t") for u in receipt.updates]
    out = []
    for i in range(s, min(e, len(receipt.updates)) + 1):
        a, b = stamps[i - 1], stamps[i]
        if a is not None and b is not None:
            out.append((i, float(b) - float(a)))
    return out


def window_mean_step_time(receipt: Receipt, window: tuple[int, int]) -> float:
    """The run's window step time T on the wrapper's clock (:func:`infrarsi.verifier.speed.window_step_time`:
    mean step time after winsorizing rare stragglers); NaN when no stamped update falls in the window."""
    return speed.window_step_time(window_step_times(receipt, window))


def job_mean_step_time(receipt: Receipt, window: tuple[int, int]) -> float:
    """The same statistic over the job's self-reported ``step_time_s`` in the window (NaN when none is usable)."""
    s, e = window
    t = [num(u.get("step_time_s")) for u in receipt.updates[s - 1:e] if u.get("step_time_s") is not None]
    return speed.window_step_time(t)


def clock_offsets(receipt: Receipt, window: tuple[int, int]) -> list[float]:
    """Per-update ln(wrapper gap / job-reported step time) inside the window, for updates that have both.

    A gap of zero (lines written in one burst) gives -inf, a job step of zero +inf; neither is dropped."""
    out = []
    for i, w in _stamp_gaps(receipt, window):
        j = num(receipt.updates[i - 1].get("step_time_s"))
        if 0 <= j < math.inf:
            out.append(math.inf if j == 0 and w > 0 else -math.inf if w <= 0 else math.log(w / j))
    return out


def _median_offset(receipt: Receipt, window: tuple[int, int]) -> float:
    """Median of :func:`clock_offsets` (NaN when none, or when +inf and -inf meet in the middle)."""
    o = clock_offsets(receipt, window)
    if not o:
        return math.nan
    return statistics.median(o)


def timing_consistent(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """The gain on the wrapper's clock agrees with the gain on the job's clock: |delta ln| <= timing_tol.

    Both clocks use the one window statistic; the references' is the mean of their c = ln T.  delta ln is the
    reference's clock offset ln(W/J) minus the trial's.  When it is negative beyond the tolerance (the wrapper saw
    the trial *slower* than the job's clock says) and the per-update offsets agree in the median (the same
    comparison on :func:`clock_offsets`), the skew is a minority of stalled gaps between update stamps: the
    trial's measured time includes them, so they cost the trial and claim nothing, and the check passes saying
    so.  A job that under-reports every step moves the median and still fails.  A positive delta ln (the wrapper
    saw the trial *faster* than its job clock says, relative to the references) is excused only when the
    trial's whole-window offset ln(W/J) agrees with the references' per-update median, i.e. the references'
    stamps were stalled; a trial that holds lines back and writes them in bursts shrinks its own window offset
    and still fails, because the speed is measured on the wrapper's clock."""
    if not refs:
        return Item("timing_consistent", "L5", "unchecked", "no reference")
    rws = [window_mean_step_time(r, spec.window) for r in refs]
    rjs = [job_mean_step_time(r, spec.window) for r in refs]
    if not all(0 < x < math.inf for x in rws + rjs):
        return Item("timing_consistent", "L5", "unchecked", "the reference has no clock timestamps in the window")
    cw, cj = window_mean_step_time(trial, spec.window), job_mean_step_time(trial, spec.window)
    if not (0 < cj < math.inf):
        return Item("timing_consistent", "L5", "fail", "no valid job-reported step times in the window")
    if not (cw > 0):
        return Item("timing_consistent", "L5", "fail", "no wrapper clock time passed inside the window")
    gain_wrapper = statistics.fmean(math.log(x) for x in rws) - math.log(cw)
    gain_job = statistics.fmean(math.log(x) for x in rjs) - math.log(cj)
    d = gain_wrapper - gain_job
    ok = abs(d) <= spec.timing_tol
    said = (f"gain {gain_wrapper:+.3f} on the wrapper clock vs {gain_job:+.3f} on the job clock: "
            f"|delta ln| {abs(d):.3f} {'<=' if ok else '>'} {spec.timing_tol}")
    if not ok:  # NaN below (no usable per-update pair) is never excused
        ref_med = statistics.fmean(_median_offset(r, spec.window) for r in refs)
        if d < 0 and abs(ref_med - _median_offset(trial, spec.window)) <= spec.timing_tol:
            return Item("timing_consistent", "L5", "pass",
                        f"{said}, but the per-update offsets agree in the median: stalls between a minority of the "
                        f"trial's update stamps, counted in its time")
        if d > 0 and abs(ref_med - (math.log(cw) - math.log(cj))) <= spec.timing_tol:
            return Item("timing_consistent", "L5", "pass",
                        f"{said}, but the trial's window offset agrees with the references' per-update median: "
                        f"stalls between the references' update stamps")
    return Item("timing_consistent", "L5", "pass" if ok else "fail", said)


def speed_reproduces(ref_times: list[float], cand_times: list[float], promotion_margin: float) -> Item:
    """Promotion gate (:func:`infrarsi.verifier.speed.clears`): pair j is (ref_times[j], cand_times[j]), each a
    run's window step time T; passes when exp(mean_j ln(T_ref,j / T_cand,j)) - 1 > promotion_margin.  The
    controller's promotion decision calls the same function on the same pairs and margin, so they agree."""
    if not ref_times or not cand_times:
        return Item("speed_reproduces", "L5", "unchecked", "no back-to-back re-run times")
    if len(ref_times) != len(cand_times):
        return Item("speed_reproduces", "L5", "unchecked",
                    f"{len(ref_times)} reference and {len(cand_times)} candidate re-run times do not pair up")
    ps = speed.paired_speedup(zip(ref_times, cand_times))
    if ps is None:
        return Item("speed_reproduces", "L5", "unchecked", "re-run times are not positive")
    ok = speed.clears(ps, promotion_margin)
    return Item("speed_reproduces", "L5", "pass" if ok else "fail",
                f"paired speedup {ps.speedup - 1:+.2%} over {ps.n_pairs} back-to-back pair(s) "
                f"{'>' if ok else '<='} margin {promotion_margin:.2%}")


def resume_continues(trial: Receipt, refs: Refs, spec: JudgeSpec) -> Item:
    """(Conditional) the resumed run's footer ``resume_loss`` within tau of the reference's."""
    return _conditional_compare("resume_continues", "resume_loss", spec.check_resume, spec.tau, trial, refs)


def user_tests(exit_codes: dict[str, int] | None, active: bool) -> Item:
    """(Conditional) every configured test command exited 0."""
    if not active:
        return Item("user_tests", "L5", "unchecked", "not configured", required=False)
    if not exit_codes:
        return Item("user_tests", "L5", "unchecked", "test commands configured but no results")
    bad = sorted(name for name, code in exit_codes.items() if code != 0)
    if bad:
        return Item("user_tests", "L5", "fail", f"{len(bad)} test command(s) failed, first {bad[0]!r}")
    return Item("user_tests", "L5", "pass", f"{len(exit_codes)} test command(s) exited 0")
