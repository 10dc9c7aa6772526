"""LocalExecutor: trials as subprocesses on this machine (the embedded default).

Each trial runs as ``python -I shim.py OUTDIR -- python -I -m infrarsi.verifier.exec ... -- <argv>`` in its own
session (``start_new_session``), so cancel kills the whole tree; the wrapper runs the job inside bubblewrap
(its PID namespace ends every process of the trial).  ``-I`` keeps the trial tree (the cwd) off ``sys.path``, so
nothing in it can shadow the shim or the wrapper.  The shim and the wrapper get an allow-listed environment
(:func:`infrarsi.verifier.sandbox.job_env`: never the controller's ``INFRARSI_HOME``, database URL or key file)
plus the spec's ``env``; the wrapper narrows it again for the job.  GPU slots
are handed out through ``CUDA_VISIBLE_DEVICES``; at most ``max_concurrent``
trials run at once and the rest wait in a FIFO queue (state ``pending``),
started by later ``poll`` calls.

Files in the trial's ``outdir`` (what makes adoption by a new process work):

* ``local-launch.json`` -- job id, command, env, cwd, GPUs wanted (written at submit)
* ``local-run.json``    -- pid, pid start ticks, assigned GPUs, start time (at start)
* ``local-exit.json``   -- exit code / signal / end time (written by the shim)
* ``local-cancel``      -- the cancel reason, written before the tree is killed
* ``receipt.json``, ``job.log`` -- written by the exec wrapper
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from infrarsi.controller.errors import ExecutorError
from infrarsi.controller.executors import procs
from infrarsi.controller.executors.base import LOG_NAME, RECEIPT_NAME, Executor, JobHandle, JobStatus, TrialSpec
from infrarsi.controller.executors.classify import classify, log_tail, read_receipt
from infrarsi.controller.executors.render import launch_argv, wrapper_argv
from infrarsi.verifier.sandbox import BWRAP_ENV, job_env

SHIM = Path(__file__).with_name("shim.py")
LAUNCH_FILE = "local-launch.json"
RUN_FILE = "local-run.json"
EXIT_FILE = "local-exit.json"
CANCEL_FILE = "local-cancel"


def detect_gpus() -> list[str]:
    """GPU ids from ``CUDA_VISIBLE_DEVICES`` or ``nvidia-smi -L``; empty on a CPU machine."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return [g.strip() for g in cvd.split(",") if g.strip() and g.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass
class _Trial:
    handle: JobHandle
    launch: dict[str, Any]
    proc: subprocess.Popen[bytes] | None = None
    run: dict[str, Any] | None = None
    gpus: list[str] = field(default_factory=list)
    done: JobStatus | None = None


class LocalExecutor(Executor):
    """Run trials as local subprocesses.

    ``max_concurrent``: trials running at once; ``gpus``: GPU ids to hand out
    (default: detected; none on a CPU machine); ``python``: interpreter for the
    wrapper; ``wrapper``: replaces ``[python, -m, infrarsi.verifier.exec]``;
    ``kill_grace_s``: SIGTERM-to-SIGKILL delay on cancel.
    """

    backend = "local"

    def __init__(
        self,
        max_concurrent: int = 1,
        gpus: Sequence[str] | None = None,
        python: str = sys.executable,
        wrapper: Sequence[str] | None = None,
        kill_grace_s: float = 5.0,
    ) -> None:
        if max_concurrent < 1:
            raise ExecutorError(f"max_concurrent: must be >= 1, got {max_concurrent}")
        self.max_concurrent = max_concurrent
        self.gpus = list(gpus) if gpus is not None else detect_gpus()
        self.python = python
        self.wrapper = list(wrapper) if wrapper is not None else None
        self.kill_grace_s = kill_grace_s
        self._trials: dict[str, _Trial] = {}
        self._queue: list[str] = []  # trial ids waiting for a slot, FIFO

    # ------------------------------------------------------------------ submit
    def submit(self, spec: TrialSpec) -> JobHandle:
        if spec.launcher == "torchrun-multinode" or spec.nodes != 1:
            raise ExecutorError(f"launcher: the local executor runs single-node trials only (trial {spec.trial_id})")
        if spec.gpus_per_node > len(self.gpus):
            raise ExecutorError(
                f"gpus_per_node: trial {spec.trial_id} wants {spec.gpus_per_node} GPU(s), this machine has {len(self.gpus)}")
        if spec.trial_id in self._trials and self._trials[spec.trial_id].done is None:
            raise ExecutorError(f"trial_id: {spec.trial_id} is already live")
        for name, _ in spec.env:
            if not name or "=" in name or "," in name:
                raise ExecutorError(f"env: {name!r} is not a valid environment variable name")
        outdir = Path(spec.outdir)
        try:
            outdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ExecutorError(f"outdir: cannot create {outdir}: {exc}") from exc
        cmd = [*wrapper_argv(spec, self.python, self.wrapper), "--", *launch_argv(spec, self.python)]
        handle = JobHandle(trial_id=spec.trial_id, backend=self.backend,
                           job_id=f"local-{uuid.uuid4().hex[:16]}", submit_time=time.time(), outdir=str(outdir))
        launch = {
            "job_id": handle.job_id,
            "trial_id": spec.trial_id,
            "cmd": cmd,
            "env": [list(kv) for kv in spec.env],
            "cwd": str(spec.workdir),
            "gpus_per_node": spec.gpus_per_node,
            "pending_deadline_s": spec.pending_deadline_s,
            "submit_time": handle.submit_time,
        }
        for stale in (RUN_FILE, EXIT_FILE, CANCEL_FILE):
            (outdir / stale).unlink(missing_ok=True)
        _write_json(outdir / LAUNCH_FILE, launch)
        self._trials[spec.trial_id] = _Trial(handle=handle, launch=launch)
        self._queue.append(spec.trial_id)
        self._start_queued()
        return handle

    def adopt(self, trial_id: str, outdir: Path) -> JobHandle | None:
        launch = _read_json(Path(outdir) / LAUNCH_FILE)
        if not launch or launch.get("trial_id") != trial_id or not launch.get("job_id"):
            return None
        return JobHandle(trial_id=trial_id, backend=self.backend, job_id=str(launch["job_id"]),
                         submit_time=float(launch.get("submit_time") or 0.0), outdir=str(outdir))

    # ------------------------------------------------------------------ slots
    def _busy_gpus(self) -> set[str]:
        return {g for t in self._trials.values() if t.run is not None and t.done is None for g in t.gpus}

    def _running_count(self) -> int:
        return sum(1 for t in self._trials.values() if t.run is not None and t.done is None)

    def free_slots(self) -> int | None:
        return max(0, self.max_concurrent - self._running_count() - len(self._queue))

    def next_poll_in(self) -> float:
        return 0.5

    def _start_queued(self) -> None:
        while self._queue and self._running_count() < self.max_concurrent:
            t = self._trials[self._queue[0]]
            want = int(t.launch.get("gpus_per_node") or 0)
            free = [g for g in self.gpus if g not in self._busy_gpus()]
            if want > len(free):
                return  # FIFO: wait for GPUs rather than starve the head
            self._queue.pop(0)
            self._launch(t, free[:want])

    def _launch(self, t: _Trial, gpus: list[str]) -> None:
        outdir = Path(t.handle.outdir)
        extra = {k: v for k, v in t.launch["env"]}
        extra["INFRARSI_TRIAL_ID"] = t.handle.trial_id
        if gpus or self.gpus:
            extra["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        env = job_env(os.environ, (), extra)
        if os.environ.get(BWRAP_ENV):  # which bubblewrap the wrapper uses (configuration, not a secret)
            env[BWRAP_ENV] = os.environ[BWRAP_ENV]
        log = open(outdir / "local-launcher.log", "ab")
        try:
            proc = subprocess.Popen([self.python, "-I", str(SHIM), str(outdir), "--", *t.launch["cmd"]],
                                    cwd=t.launch["cwd"], env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            log.close()
            t.done = self._finished(t, "crash", f"could not start the trial: {exc}", None, None)
            return
        finally:
            if not log.closed:
                log.close()
        t.proc, t.gpus = proc, gpus
        t.run = {"job_id": t.handle.job_id, "pid": proc.pid, "ticks": procs.start_ticks(proc.pid),
                 "gpus": gpus, "start_time": time.time()}
        _write_json(outdir / RUN_FILE, t.run)

    # ------------------------------------------------------------------ poll
    def _adopt(self, h: JobHandle) -> _Trial:
        outdir = Path(h.outdir)
        launch = (_read_json(outdir / LAUNCH_FILE) or {}) if h.outdir else {}
        t = _Trial(handle=h, launch=launch)
        if launch.get("job_id") != h.job_id:
            t.done = JobStatus(handle=h, state="lost", reason=f"no launch record for {h.job_id} in {outdir}")
            return t
        run = _read_json(outdir / RUN_FILE)
        if run and run.get("job_id") == h.job_id:
            t.run, t.gpus = run, list(run.get("gpus") or [])
        elif not (outdir / CANCEL_FILE).exists():
            self._queue.append(h.trial_id)  # submitted by an earlier process, never started
        return t

    def _finished(self, t: _Trial, outcome: str | None, reason: str,
                  exit_code: int | None, sig: int | None, end: float | None = None) -> JobStatus:
        outdir = Path(t.handle.outdir)
        receipt = outdir / RECEIPT_NAME
        log = outdir / LOG_NAME
        return JobStatus(
            handle=t.handle, state="finished", outcome=outcome, exit_code=exit_code, signal=sig, reason=reason,
            receipt_path=receipt if receipt.exists() else None, log_path=log if log.exists() else None,
            start_time=(t.run or {}).get("start_time"), end_time=end or time.time(),
            gpus=int(t.launch.get("gpus_per_node") or 0))

    def _refresh(self, t: _Trial) -> None:
        """Move a started trial to finished when its process tree is gone."""
        if t.done is not None or t.run is None:
            return
        outdir = Path(t.handle.outdir)
        if t.proc is not None:
            t.proc.poll()  # reap our own child
        exit_rec = _read_json(outdir / EXIT_FILE)
        if exit_rec is None and procs.is_alive(int(t.run["pid"]), t.run.get("ticks")):
            return
        if exit_rec is None:
            exit_rec = _read_json(outdir / EXIT_FILE)  # it may have appeared meanwhile
        cancel = (outdir / CANCEL_FILE).read_text().strip() if (outdir / CANCEL_FILE).exists() else None
        receipt = read_receipt(outdir / RECEIPT_NAME)
        logs = log_tail([outdir / LOG_NAME, outdir / "local-launcher.log"])
        if exit_rec is None:
            state, rc, sig = "VANISHED", None, None
        else:
            state, rc, sig = "EXITED", exit_rec.get("exit_code"), exit_rec.get("signal")
        c = classify(receipt, "CANCELLED" if cancel else state, rc, sig, logs, cancel_reason=cancel)
        reason = c.reason if exit_rec is not None or receipt is not None or cancel else \
            "the launcher process vanished without recording an exit status"
        t.done = self._finished(t, c.outcome, reason, c.exit_code, c.signal,
                                end=(exit_rec or {}).get("end_time"))

    def poll(self, handles: Sequence[JobHandle]) -> dict[str, JobStatus]:
        for h in handles:
            t = self._trials.get(h.trial_id)
            if t is None or t.handle.key != h.key:
                self._trials[h.trial_id] = self._adopt(h)
        for t in self._trials.values():
            self._refresh(t)
        now = time.time()
        for tid in list(self._queue):  # pending past its deadline: cancel and account
            t = self._trials[tid]
            dl = t.launch.get("pending_deadline_s")
            if dl is not None and now - t.handle.submit_time > float(dl):
                self._queue.remove(tid)
                reason = f"pending past its deadline of {float(dl):g} s; cancelled"
                (Path(t.handle.outdir) / CANCEL_FILE).write_text(reason)
                t.done = self._finished(t, "cancelled", reason, None, None)
        self._start_queued()
        out: dict[str, JobStatus] = {}
        for h in handles:
            t = self._trials[h.trial_id]
            if t.done is not None:
                out[h.trial_id] = t.done
            elif t.run is None:
                pos = self._queue.index(h.trial_id) + 1 if h.trial_id in self._queue else 0
                out[h.trial_id] = JobStatus(handle=h, state="pending", reason=f"waiting for a local slot (queue position {pos})",
                                            gpus=int(t.launch.get("gpus_per_node") or 0))
            else:
                out[h.trial_id] = JobStatus(handle=h, state="running", reason=f"pid {t.run['pid']}",
                                            start_time=t.run.get("start_time"), gpus=len(t.gpus),
                                            log_path=Path(h.outdir) / LOG_NAME)
        return out

    # ------------------------------------------------------------------ cancel
    def cancel(self, handle: JobHandle, reason: str = "cancelled by request") -> None:
        t = self._trials.get(handle.trial_id)
        if t is None or t.handle.key != handle.key:
            t = self._adopt(handle)
            self._trials[handle.trial_id] = t
        self._refresh(t)
        if t.done is not None:
            return
        outdir = Path(handle.outdir)
        (outdir / CANCEL_FILE).write_text(reason)
        if t.run is None:
            if handle.trial_id in self._queue:
                self._queue.remove(handle.trial_id)
            t.done = self._finished(t, "cancelled", reason, None, None)
            return
        procs.kill_tree(int(t.run["pid"]), t.run.get("ticks"), self.kill_grace_s)
        if t.proc is not None:
            try:
                t.proc.wait(timeout=self.kill_grace_s + 1)
            except subprocess.TimeoutExpired:
                pass
        self._refresh(t)
