"""An in-process executor for fast tests, like submitit's debug executor: a "job" is a Python function call.

:class:`InProcessExecutor` implements the whole interface of :mod:`infrarsi.controller.executors.base`
(``submit``, ``poll``, ``cancel``, ``adopt``, ``free_slots``, ``next_poll_in``).  Contract:

* ``submit(spec)`` records a job (state ``pending``) in an :class:`InProcessCluster` and returns its handle; the
  function runs later, inside the first :meth:`~InProcessExecutor.poll` that sees the job while the cluster is not
  on hold (``cluster.hold = True`` keeps every job ``running`` without running it: slot accounting and cancel
  tests).  The function gets a :class:`TrialRun` (the spec, the job's start time, a simulated clock) and returns
  None or ``0`` (exit status 0), another int (a failing exit status: outcome ``crash``), or one of the outcome
  names; an exception it raises is outcome ``crash`` with the exception's first line as the reason.
* The executor's start/end times are what a scheduler would report: ``start`` is the wall clock when the function
  starts, ``end`` the larger of the real end and ``start`` plus the time the function declared it spent
  (:meth:`TrialRun.advance`), so a scripted receipt's timeline fits inside the executor's window (L5
  ``executor_clock``) and the cost ledger sees the declared GPU time.
* The cluster outlives an executor: a new executor over the same cluster (a controller "restart") polls and
  adopts the jobs the old one submitted, exactly like a Slurm controller that survives the daemon.  ``adopt``
  returns the newest job submitted under a trial id that has not been cancelled.
* ``cancel`` marks a job finished with outcome ``cancelled`` (idempotent; a finished job stays as it was).
* ``free_slots`` is ``slots`` minus the unfinished jobs (None when ``slots`` is None: unbounded).

:func:`scripted_receipt` builds a job function that writes a real signed receipt, shaped exactly like the exec
wrapper's (:mod:`infrarsi.verifier.exec`), from a scripted step time and loss curve, signed with the per-trial
key the controller wrote into ``spec.key_file``.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, Union

from infrarsi.controller.errors import ExecutorError
from infrarsi.controller.executors.base import LOG_NAME, RECEIPT_NAME, Executor, JobHandle, JobStatus, TrialSpec

OUTCOMES = ("ok", "oom", "crash", "timeout", "cancelled")
JobResult = Union[None, int, str]


@dataclass
class TrialRun:
    """What a job function sees: its spec, its start (unix seconds) and a simulated clock it may advance."""

    spec: TrialSpec
    start_unix: float
    elapsed_s: float = 0.0

    def advance(self, seconds: float) -> None:
        """Declare that the job spent ``seconds`` more (simulated) wall time."""
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"advance: seconds must be finite and >= 0, got {seconds!r}")
        self.elapsed_s += seconds


JobFn = Callable[[TrialRun], JobResult]


@dataclass
class _Job:
    handle: JobHandle
    spec: TrialSpec
    state: str = "pending"
    outcome: str | None = None
    reason: str = ""
    exit_code: int | None = None
    start: float | None = None
    end: float | None = None


@dataclass
class InProcessCluster:
    """The "scheduler" every :class:`InProcessExecutor` over it shares: jobs by job id, a hold switch and a log of
    the trial ids it ran (in order)."""

    hold: bool = False
    jobs: dict[str, _Job] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def live(self) -> list[_Job]:
        with self.lock:
            return [j for j in self.jobs.values() if j.state in ("pending", "running")]


class InProcessExecutor(Executor):
    """Runs ``fn`` in this process for each trial (see the module docstring for the contract)."""

    backend = "inprocess"

    def __init__(self, fn: JobFn, slots: int | None = None, cluster: InProcessCluster | None = None,
                 clock: Callable[[], float] = time.time, poll_s: float = 0.0):
        if slots is not None and slots < 1:
            raise ExecutorError(f"slots: must be >= 1 or None, got {slots}")
        self.fn = fn
        self.slots = slots
        self.cluster = cluster if cluster is not None else InProcessCluster()
        self.clock = clock
        self.poll_s = poll_s
        self.submitted: list[TrialSpec] = []

    # ------------------------------------------------------------------ interface
    def submit(self, spec: TrialSpec) -> JobHandle:
        with self.cluster.lock:
            job_id = f"ip{next(self.cluster._ids)}"
            handle = JobHandle(trial_id=spec.trial_id, backend=self.backend, job_id=job_id,
                               submit_time=self.clock(), outdir=str(spec.outdir))
            self.cluster.jobs[job_id] = _Job(handle=handle, spec=spec)
            self.submitted.append(spec)
            return handle

    def poll(self, handles: Sequence[JobHandle]) -> dict[str, JobStatus]:
        out: dict[str, JobStatus] = {}
        for h in handles:
            with self.cluster.lock:
                job = self.cluster.jobs.get(h.job_id)
                if job is not None and job.handle.key != h.key:
                    job = None  # a reused job id of another job
                if job is not None and job.state in ("pending", "running"):
                    if self.cluster.hold:
                        if job.state == "pending":
                            job.state, job.start = "running", self.clock()
                    else:
                        self._run(job)
            out[h.trial_id] = self._status(h, job)
        return out

    def cancel(self, handle: JobHandle) -> None:
        with self.cluster.lock:
            job = self.cluster.jobs.get(handle.job_id)
            if job is None or job.state == "finished":
                return
            now = self.clock()
            job.state, job.outcome, job.reason = "finished", "cancelled", "cancelled by the controller"
            job.start = job.start if job.start is not None else None
            job.end = now if job.start is not None else None

    def free_slots(self) -> int | None:
        if self.slots is None:
            return None
        return max(0, self.slots - len(self.cluster.live()))

    def adopt(self, trial_id: str, outdir: Path) -> JobHandle | None:
        with self.cluster.lock:
            mine = [j for j in self.cluster.jobs.values()
                    if j.handle.trial_id == trial_id and j.outcome != "cancelled"]
            return mine[-1].handle if mine else None

    def next_poll_in(self) -> float:
        return self.poll_s

    # ------------------------------------------------------------------ running
    def _run(self, job: _Job) -> None:
        start = job.start if job.start is not None else self.clock()
        run = TrialRun(spec=job.spec, start_unix=start)
        job.spec.outdir.mkdir(parents=True, exist_ok=True)
        self.cluster.ran.append(job.spec.trial_id)
        try:
            result = self.fn(run)
        except Exception as exc:  # noqa: BLE001 - a crashing job is an outcome, not an executor failure
            lines = str(exc).strip().splitlines()
            job.outcome, job.reason = "crash", f"{type(exc).__name__}: {lines[0] if lines else ''}".strip()
            job.exit_code = 1
        else:
            job.outcome, job.reason, job.exit_code = _classify(result)
        job.state, job.start = "finished", start
        job.end = max(self.clock(), start + run.elapsed_s)
        (job.spec.outdir / LOG_NAME).write_text(f"in-process job {job.handle.job_id}: {job.outcome} {job.reason}\n")

    def _status(self, h: JobHandle, job: _Job | None) -> JobStatus:
        if job is None:
            return JobStatus(handle=h, state="lost", reason=f"in-process job {h.job_id} is unknown to this cluster")
        receipt = job.spec.outdir / RECEIPT_NAME
        return JobStatus(handle=h, state=job.state, outcome=job.outcome if job.state == "finished" else None,
                         exit_code=job.exit_code, reason=job.reason,
                         receipt_path=receipt if receipt.is_file() else None, log_path=job.spec.outdir / LOG_NAME,
                         start_time=job.start, end_time=job.end, gpus=job.spec.nodes * job.spec.gpus_per_node)


def _classify(result: JobResult) -> tuple[str, str, int | None]:
    if result is None or result == 0:
        return "ok", "", 0
    if isinstance(result, bool) or not isinstance(result, (int, str)):
        return "crash", f"the job function returned {type(result).__name__}, not an exit status or outcome", 1
    if isinstance(result, int):
        return "crash", f"exit code {result}", result
    if result not in OUTCOMES:
        return "crash", f"the job function returned unknown outcome {result!r}", 1
    return result, result, 0 if result == "ok" else 1


# ---------------------------------------------------------------------- scripted receipts
def _num(v: float | Callable[[TrialRun], float], run: TrialRun) -> float:
    return float(v(run) if callable(v) else v)


def knob(run: TrialRun, name: str) -> str | None:
    """The value of ``--name=value`` in the trial's command line (the toy contract's flags), or None."""
    for arg in run.spec.argv:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def scripted_receipt(step_time_s: float | Callable[[TrialRun], float] = 0.05,
                     loss0: float | Callable[[TrialRun], float] = 3.0, updates: int | None = None,
                     header: dict[str, Any] | None = None, jitter: float = 0.01, exit_code: int = 0,
                     errors: Sequence[str] = (), oom: dict[str, Any] | None = None) -> JobFn:
    """A job function writing an honest, signed receipt like the exec wrapper's.

    ``step_time_s`` and ``loss0`` are numbers or functions of the :class:`TrialRun` (e.g. of a knob, see
    :func:`knob`).  The run has ``updates`` updates (default: the spec's ``updates``, else 8) whose step times
    carry a deterministic relative ``jitter`` (run-to-run noise the doctor calibrates on); the loss curve is
    ``loss0 / (1 + 0.1 i)``.  A non-zero ``exit_code``, ``errors`` (log lines) and ``oom`` (the wrapper's OOM
    record) describe failing runs.  Returns the exit code.
    """
    from infrarsi.verifier import signing
    from infrarsi.verifier.exec import hash_manifest
    from infrarsi.verifier.receipt import SCHEMA

    def run_job(run: TrialRun) -> int:
        spec = run.spec
        n = updates or spec.updates or 8
        step = _num(step_time_s, run)
        base_loss = _num(loss0, run)
        seed = sum(spec.trial_id.encode()) % 97
        manifest = json.loads(spec.frozen_manifest.read_text()) if spec.frozen_manifest else {}
        frozen = hash_manifest(manifest, Path(spec.workdir))
        t, ups = 0.01, []
        for i in range(1, n + 1):
            dt = step * (1.0 + jitter * math.sin(1.7 * i + seed))
            t += dt
            ups.append({"index": i, "loss": base_loss / (1 + 0.1 * i), "grad_norm": 1.0 / i, "tokens": 32,
                        "samples": 2, "seq_len": 16, "opt_step": i, "lr": 1e-3, "batch_digest": f"batch-{i:04d}",
                        "step_time_s": dt, "peak_mem_gib": None, "phases": {"forward": dt * 0.4, "backward": dt * 0.5,
                                                                             "optimizer": dt * 0.1, "data": 0.0},
                        "wall_t": round(t, 6)})
        wall = t + 0.02
        run.advance(wall)
        receipt: dict[str, Any] = {
            "schema": SCHEMA, "trial_id": spec.trial_id,
            "header": header or {"model_digest": "toy-model-v1", "params": 1000, "precision": "fp32", "world_size": 1,
                                 "tokens_per_update": 32, "seq_len": 16, "versions": {}, "extra": {},
                                 "wall_t": 0.005},
            "updates": ups if exit_code == 0 else ups[: n // 2],
            "footer": {"completed": n, "wall_t": round(t + 0.01, 6)} if exit_code == 0 else None,
            "wrapper": {
                "exit_code": exit_code, "signal": None, "timed_out": False, "wall_s": round(wall, 6),
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(run.start_unix)),
                "clock": {"start_unix": round(run.start_unix, 6), "end_unix": round(run.start_unix + wall, 6)},
                "isolation": {"mode": spec.isolation, "detail": "in-process executor"},
                "limits": {"max_receipt_lines": n + 16, "max_receipt_bytes": (n + 16) * 65536,
                           "receipt_lines_dropped": 0, "receipt_bytes_dropped": 0, "log_bytes_dropped": 0,
                           "disk_limit_bytes": None, "disk_used_bytes": 4096, "disk_exceeded": False},
                "oom": oom, "errors": [{"line": e} for e in errors], "bad_lines": 0,
                "frozen_manifest": manifest, "frozen_before": frozen, "frozen_after": frozen,
                "memory_cap_gib": spec.memory_cap_gib, "argv": list(spec.argv), "forwarded_signals": [],
            },
            "signature": None,
        }
        if spec.key_file is not None and spec.key_file.is_file():
            key = signing.read_key_file(str(spec.key_file))
            spec.key_file.unlink()  # like the wrapper: the key is gone once the job started
            receipt["signature"] = signing.sign(receipt, key)
        (spec.outdir / RECEIPT_NAME).write_text(json.dumps(receipt, sort_keys=True))
        return exit_code

    return run_job
