"""SlurmExecutor: trials as Slurm batch jobs, through the CLIs (or pyslurm).

Polling (the expensive part on a big cluster) is batched:

* one ``squeue --jobs=<all live ids> --states=all`` per poll for every live
  trial (``--states=all`` also shows jobs that finished less than MinJobAge ago);
* one ``sacct`` call (slurmdbd) -- or ``sacct -c`` (the jobcomp file) where
  accounting storage is disabled -- only for jobs that left the queue, and only
  in polls where some did.  ``scontrol show job`` was not chosen: it takes one
  id per call or dumps the whole job table, and knows nothing about jobs that
  already left the controller's memory.
* When pyslurm is importable (a build matching the site's Slurm), the queue
  part is one ``pyslurm.Jobs.load()`` RPC instead of ``squeue``.

Rate: after a submit the executor allows queries after ``backoff`` (2, 4, 8 s),
then every ``steady_interval_s``; a ``poll`` sooner than that returns the cached
statuses without asking Slurm (handles never seen before always trigger a
query).  :meth:`SlurmExecutor.next_poll_in` tells the daemon when to come back.

Identity: a job is ``(job_id, submit_time)``; a queue or accounting row only
counts as ours when its submit time lies within ``submit_tolerance_s`` of the
handle's (or of our last requeue), because Slurm reuses ids.

Requeue: a job that ends ``PREEMPTED`` or ``NODE_FAIL`` is put back with
``scontrol requeue`` (at most ``max_requeues`` times).  The exec wrapper deletes
the per-trial key file when it starts, so the executor keeps a copy in
``state_dir/keys`` (mode 0600; keep ``state_dir`` on the controller host, not on
the shared filesystem the jobs see) and restores it before requeueing.

Pending deadline: a job still pending ``pending_deadline_s`` after submission is
cancelled and reported finished/cancelled with that reason.

Outcome: receipt first, then Slurm state and logs (:mod:`classify`).  A job that
ended without a receipt gets ``receipt_grace_s`` for the file to appear
(shared-filesystem latency) and is then a crash with a reason that says so.

Files per trial (in ``outdir``): ``job.sbatch``, ``slurm-<id>.out`` (Slurm's own
output: stepd messages such as the memory-limit kill), ``slurm-job.json``
(our metadata, so a new process can adopt the handle), ``slurm-cancel`` (the
reason when we cancelled), and the wrapper's ``receipt.json`` / ``job.log``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from infrarsi.controller.errors import ExecutorError
from infrarsi.controller.executors.base import LOG_NAME, RECEIPT_NAME, Executor, JobHandle, JobStatus, TrialSpec
from infrarsi.controller.executors.classify import classify, log_tail, read_receipt
from infrarsi.controller.executors.render import render_sbatch
from infrarsi.controller.executors.slurm_cli import JobRow, Runner, SlurmCLI, parse_time

META_FILE = "slurm-job.json"
CANCEL_FILE = "slurm-cancel"
PENDING_STATES = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING",
                  "SUSPENDED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
RUNNING_STATES = {"RUNNING", "COMPLETING", "STOPPED", "SIGNALING", "STAGE_OUT"}
REQUEUE_STATES = {"PREEMPTED", "NODE_FAIL"}


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/infrarsi/slurm`` (default ``~/.local/state/infrarsi/slurm``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "infrarsi" / "slurm"


def job_name(trial_id: str) -> str:
    """The Slurm job name the templates give a trial (used to guard scancel)."""
    return "infrarsi-" + re.sub(r"[^A-Za-z0-9_.-]", "_", trial_id)[:100]


def _pyslurm_available() -> bool:
    try:
        import pyslurm  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable"
        return False
    return True


class SlurmExecutor(Executor):
    """Submit trials with sbatch and poll them in batches.

    ``python``: interpreter on the compute nodes; ``steady_interval_s`` and
    ``backoff``: the query schedule; ``extra_sbatch``: site ``#SBATCH`` options;
    ``state_dir``: private executor state (key copies); ``wrapper``: replaces
    ``[python, -m, infrarsi.verifier.exec]``; ``runner``: runs the Slurm CLIs;
    ``use_pyslurm``: None = when importable.
    """

    backend = "slurm"

    def __init__(
        self,
        python: str = sys.executable,
        steady_interval_s: float = 30.0,
        backoff: Sequence[float] = (2.0, 4.0, 8.0),
        extra_sbatch: Sequence[str] = (),
        state_dir: Path | str | None = None,
        wrapper: Sequence[str] | None = None,
        runner: Runner | None = None,
        receipt_grace_s: float = 5.0,
        max_requeues: int = 3,
        submit_tolerance_s: float = 120.0,
        use_pyslurm: bool | None = None,
    ) -> None:
        self.python = python
        self.steady_interval_s = float(steady_interval_s)
        self.backoff = [float(b) for b in backoff]
        self.extra_sbatch = list(extra_sbatch)
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.wrapper = list(wrapper) if wrapper is not None else None
        self.cli = SlurmCLI(runner)
        self.receipt_grace_s = receipt_grace_s
        self.max_requeues = max_requeues
        self.submit_tolerance_s = submit_tolerance_s
        self.use_pyslurm = _pyslurm_available() if use_pyslurm is None else use_pyslurm
        self._final: dict[str, JobStatus] = {}     # trial_id -> finished status
        self._last: dict[str, JobStatus] = {}      # trial_id -> last live status
        self._ended_at: dict[str, float] = {}      # trial_id -> when first seen ended w/o receipt
        self._next_query_at = 0.0
        self._backoff_idx = len(self.backoff)

    # ------------------------------------------------------------------ submit
    def submit(self, spec: TrialSpec) -> JobHandle:
        outdir = Path(spec.outdir)
        script = render_sbatch(spec, self.python, self.extra_sbatch, self.wrapper)
        try:
            outdir.mkdir(parents=True, exist_ok=True)
            for stale in (RECEIPT_NAME, LOG_NAME, CANCEL_FILE, META_FILE):
                (outdir / stale).unlink(missing_ok=True)
            (outdir / "job.sbatch").write_text(script, encoding="utf-8")
        except OSError as exc:
            raise ExecutorError(f"outdir: cannot write {outdir}: {exc}") from exc
        key_copy = None
        if spec.key_file is not None and Path(spec.key_file).exists():
            keys = self.state_dir / "keys"
            keys.mkdir(parents=True, exist_ok=True, mode=0o700)
            key_copy = keys / f"{job_name(spec.trial_id)}.key"
            shutil.copyfile(spec.key_file, key_copy)
            os.chmod(key_copy, 0o600)
        t0 = time.time()
        try:
            job_id = self.cli.sbatch(str(outdir / "job.sbatch"))
        except ExecutorError:
            if key_copy is not None:
                key_copy.unlink(missing_ok=True)
            raise
        handle = JobHandle(trial_id=spec.trial_id, backend=self.backend, job_id=job_id,
                           submit_time=t0, outdir=str(outdir))
        self._write_meta(handle, {
            "trial_id": spec.trial_id, "job_id": job_id, "submit_time": t0, "pending_deadline_s": spec.pending_deadline_s,
            "gpus": spec.gpus_per_node * spec.nodes, "key_file": str(spec.key_file) if spec.key_file else None,
            "key_copy": str(key_copy) if key_copy else None, "requeues": [],
        })
        self._final.pop(spec.trial_id, None)
        self._last.pop(spec.trial_id, None)
        # back off: the next queries come backoff[0], backoff[1], ... seconds apart
        now = time.time()
        if self.backoff:
            self._backoff_idx = 1
            self._next_query_at = min(self._next_query_at, now + self.backoff[0]) \
                if self._next_query_at > now else now + self.backoff[0]
        return handle

    def adopt(self, trial_id: str, outdir: Path) -> JobHandle | None:
        """From ``slurm-job.json``; if the submitter died between ``sbatch`` and writing
        it, one ``squeue --name`` call finds the job by its name."""
        outdir = Path(outdir)
        try:
            meta = json.loads((outdir / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = None
        if isinstance(meta, dict) and meta.get("trial_id") == trial_id and meta.get("job_id"):
            return JobHandle(trial_id=trial_id, backend=self.backend, job_id=str(meta["job_id"]),
                             submit_time=float(meta.get("submit_time") or 0.0), outdir=str(outdir))
        if not (outdir / "job.sbatch").exists():
            return None
        rows = [r for r in self.cli.squeue_by_name(job_name(trial_id)) if r.submit is not None]
        if not rows:
            return None
        row = max(rows, key=lambda r: r.submit or 0.0)
        handle = JobHandle(trial_id=trial_id, backend=self.backend, job_id=row.job_id,
                           submit_time=float(row.submit or 0.0), outdir=str(outdir))
        self._write_meta(handle, {"trial_id": trial_id, "job_id": row.job_id, "submit_time": handle.submit_time,
                                  "pending_deadline_s": None, "gpus": 0, "key_file": None, "key_copy": None,
                                  "requeues": [], "adopted_by_name": True})
        return handle

    def _meta(self, h: JobHandle) -> dict[str, Any]:
        try:
            data = json.loads((Path(h.outdir) / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) and data.get("job_id") == h.job_id else {}

    def _write_meta(self, h: JobHandle, meta: dict[str, Any]) -> None:
        path = Path(h.outdir) / META_FILE
        tmp = path.with_name(f".{META_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(meta, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)

    # ------------------------------------------------------------------ poll
    def next_poll_in(self) -> float:
        return max(0.0, self._next_query_at - time.time())

    def _schedule_next(self, now: float) -> None:
        if self._backoff_idx < len(self.backoff):
            self._next_query_at = now + self.backoff[self._backoff_idx]
            self._backoff_idx += 1
        else:
            self._next_query_at = now + self.steady_interval_s

    def _ours(self, h: JobHandle, meta: dict[str, Any], row: JobRow) -> bool:
        """Whether a row with this id is our job (Slurm reuses ids)."""
        if row.submit is None or h.submit_time <= 0:
            return True  # nothing to compare (a handle stored without its submit time)
        anchors = [h.submit_time, *[float(t) for t in meta.get("requeues", [])]]
        return any(abs(row.submit - a) <= self.submit_tolerance_s for a in anchors)

    def _queue_rows(self, ids: list[str]) -> dict[str, JobRow]:
        if self.use_pyslurm:
            try:
                return self._pyslurm_rows(ids)
            except Exception:  # noqa: BLE001 - fall back to the CLI on any pyslurm problem
                self.use_pyslurm = False
        return self.cli.squeue(ids)

    def _pyslurm_rows(self, ids: list[str]) -> dict[str, JobRow]:
        import pyslurm  # type: ignore[import-not-found]

        self.cli.calls["pyslurm.Jobs.load"] = self.cli.calls.get("pyslurm.Jobs.load", 0) + 1
        jobs = pyslurm.Jobs.load()  # one RPC: the whole job table
        wanted = set(ids)
        rows: dict[str, JobRow] = {}
        for jid, job in jobs.items():
            if str(jid) not in wanted:
                continue

            def ts(v: Any) -> float | None:
                return float(v) if isinstance(v, (int, float)) and v > 0 else (parse_time(str(v)) if v else None)

            rows[str(jid)] = JobRow(job_id=str(jid), state=str(job.state), submit=ts(getattr(job, "submit_time", None)),
                                    start=ts(getattr(job, "start_time", None)), end=ts(getattr(job, "end_time", None)),
                                    reason=str(getattr(job, "state_reason", "") or ""),
                                    exit_code=getattr(job, "exit_code", None), signal=getattr(job, "exit_code_signal", None) or None)
        return rows

    def poll(self, handles: Sequence[JobHandle]) -> dict[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        live: list[JobHandle] = []
        for h in handles:
            done = self._final.get(h.trial_id)
            if done is not None and done.handle.key == h.key:
                out[h.trial_id] = done
            elif h.backend != self.backend or not h.job_id.isdigit() or not h.outdir:
                out[h.trial_id] = JobStatus(handle=h, state="lost",
                                            reason=f"handle {h.job_id!r} is not a Slurm job with an outdir (backend {h.backend!r})")
            else:
                live.append(h)
        if not live:
            return out
        now = time.time()
        cached = all(h.trial_id in self._last and self._last[h.trial_id].handle.key == h.key for h in live)
        if cached and now < self._next_query_at:
            out.update({h.trial_id: self._last[h.trial_id] for h in live})
            return out
        rows = self._queue_rows(sorted({h.job_id for h in live}, key=int))
        self._schedule_next(now)
        metas = {h.trial_id: self._meta(h) for h in live}
        ended: list[tuple[JobHandle, JobRow | None]] = []
        for h in live:
            meta = metas[h.trial_id]
            row = rows.get(h.job_id)
            if row is not None and not self._ours(h, meta, row):
                row = None
            if row is not None and row.state in PENDING_STATES:
                dl = meta.get("pending_deadline_s")
                if dl is not None and now - h.submit_time > float(dl):
                    reason = f"pending past its deadline of {float(dl):g} s ({row.reason}); cancelled"
                    self._cancel_job(h, reason)
                    out[h.trial_id] = self._finish(h, meta, row, None, forced=("cancelled", reason))
                    continue
                out[h.trial_id] = self._live(h, meta, "pending", row, f"pending: {row.reason}")
            elif row is not None and row.state in RUNNING_STATES:
                out[h.trial_id] = self._live(h, meta, "running", row, f"{row.state.lower()} as job {h.job_id}")
            else:
                ended.append((h, row))
        if ended:
            waiting: list[tuple[JobHandle, JobRow | None]] = []
            for h, row in ended:  # ended without a receipt: give the file time to appear
                if row is not None and row.state not in REQUEUE_STATES | {"CANCELLED"} \
                        and not (Path(h.outdir) / RECEIPT_NAME).exists() \
                        and now - self._ended_at.setdefault(h.trial_id, now) < self.receipt_grace_s:
                    out[h.trial_id] = self._live(h, metas[h.trial_id], "running", row,
                                                 f"{row.state}: waiting up to {self.receipt_grace_s:g} s for the receipt")
                else:
                    waiting.append((h, row))
            ended = waiting
            need_acct = [h.job_id for h, row in ended
                         if row is None or not (Path(h.outdir) / RECEIPT_NAME).exists()]
            acct = self.cli.accounting(sorted(set(need_acct), key=int)) if need_acct else {}
            for h, row in ended:
                meta = metas[h.trial_id]
                recs = [r for r in acct.get(h.job_id, []) if self._ours(h, meta, r)]
                rec = recs[-1] if recs else None
                out[h.trial_id] = self._ended(h, meta, row, rec)
        for tid, st in out.items():
            if st.state == "finished":
                self._final[tid] = st
                self._last.pop(tid, None)
            else:
                self._last[tid] = st
        return out

    def _live(self, h: JobHandle, meta: dict[str, Any], state: str, row: JobRow | None, reason: str) -> JobStatus:
        return JobStatus(handle=h, state=state, reason=reason, start_time=row.start if row else None,
                         gpus=int(meta.get("gpus") or 0),
                         log_path=Path(h.outdir) / LOG_NAME if state == "running" else None)

    def _ended(self, h: JobHandle, meta: dict[str, Any], row: JobRow | None, rec: JobRow | None) -> JobStatus:
        """A job that is no longer pending/running (or that Slurm no longer knows)."""
        state = (row.state if row is not None else None) or (rec.state if rec is not None else None)
        has_receipt = (Path(h.outdir) / RECEIPT_NAME).exists()
        if state in REQUEUE_STATES:
            n = len(meta.get("requeues", []))
            if n < self.max_requeues:
                try:
                    self._requeue(h, meta)
                    return self._live(h, meta, "pending", row, f"requeued after {state} ({n + 1}/{self.max_requeues})")
                except ExecutorError as exc:
                    return self._finish(h, meta, row or rec, rec, forced=("crash", f"{state}; requeue failed: {exc}"))
            return self._finish(h, meta, row or rec, rec,
                                forced=("crash", f"{state} {n + 1} times; gave up after {self.max_requeues} requeues"))
        if state is None and not has_receipt:
            cancel = self._cancel_reason(h)
            if cancel:
                return self._finish(h, meta, None, None, forced=("cancelled", cancel))
            return JobStatus(handle=h, state="lost", gpus=int(meta.get("gpus") or 0),
                             reason=f"job {h.job_id} is unknown to squeue and to accounting ({self.cli.acct_mode or 'unavailable'}), and no receipt exists")
        self._ended_at.pop(h.trial_id, None)
        return self._finish(h, meta, row or rec, rec)

    def _finish(self, h: JobHandle, meta: dict[str, Any], row: JobRow | None, rec: JobRow | None,
                forced: tuple[str, str] | None = None) -> JobStatus:
        outdir = Path(h.outdir)
        receipt_path = outdir / RECEIPT_NAME
        log = outdir / LOG_NAME
        slurm_out = outdir / f"slurm-{h.job_id}.out"
        state = row.state if row is not None else None
        exit_code = rec.exit_code if rec is not None else None
        sig = rec.signal if rec is not None else None
        if forced is not None:
            outcome, reason = forced
        else:
            c = classify(read_receipt(receipt_path), state, exit_code, sig, log_tail([slurm_out, log]),
                         cancel_reason=self._cancel_reason(h))
            outcome, reason, exit_code, sig = c.outcome, c.reason, c.exit_code, c.signal
        self._drop_key_copy(meta)
        src = rec or row
        return JobStatus(
            handle=h, state="finished", outcome=outcome, exit_code=exit_code, signal=sig,
            reason=f"{reason} [job {h.job_id} {state or '?'}]",
            receipt_path=receipt_path if receipt_path.exists() else None,
            log_path=log if log.exists() else (slurm_out if slurm_out.exists() else None),
            # no End from Slurm: leave it unknown rather than guess with the poll time (the judge's executor_clock
            # would read a late poll as a run much longer than the receipt's; ingest then costs the wrapper's wall_s)
            start_time=src.start if src else None, end_time=(src.end if src and src.end else None),
            gpus=int(meta.get("gpus") or 0))

    # ------------------------------------------------------------------ cancel / requeue
    def _cancel_reason(self, h: JobHandle) -> str | None:
        p = Path(h.outdir) / CANCEL_FILE
        try:
            return p.read_text(encoding="utf-8").strip() or "cancelled"
        except OSError:
            return None

    def _cancel_job(self, h: JobHandle, reason: str) -> None:
        (Path(h.outdir) / CANCEL_FILE).write_text(reason, encoding="utf-8")
        self.cli.scancel(h.job_id, job_name(h.trial_id))

    def cancel(self, handle: JobHandle, reason: str = "cancelled by request") -> None:
        if handle.trial_id in self._final and self._final[handle.trial_id].handle.key == handle.key:
            return
        self._cancel_job(handle, reason)
        self._next_query_at = 0.0  # let the next poll see it

    def _requeue(self, h: JobHandle, meta: dict[str, Any]) -> None:
        outdir = Path(h.outdir)
        n = len(meta.get("requeues", []))
        receipt = outdir / RECEIPT_NAME
        if receipt.exists():
            receipt.replace(outdir / f"receipt.attempt{n}.json")
        if meta.get("key_copy") and meta.get("key_file") and Path(meta["key_copy"]).exists():
            shutil.copyfile(meta["key_copy"], meta["key_file"])
            os.chmod(meta["key_file"], 0o600)
        self.cli.requeue(h.job_id)
        meta = dict(meta, requeues=[*meta.get("requeues", []), time.time()])
        self._write_meta(h, meta)

    def _drop_key_copy(self, meta: dict[str, Any]) -> None:
        if meta.get("key_copy"):
            Path(meta["key_copy"]).unlink(missing_ok=True)
