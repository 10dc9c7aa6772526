"""A Slurm stand-in at the command-runner seam of the Slurm executor, for thousands of jobs.

:class:`SlurmStandin` is a ``runner`` for :class:`~infrarsi.controller.executors.slurm_cli.SlurmCLI`: it answers
``sbatch --parsable``, ``squeue --jobs=... --states=all`` / ``squeue --name=...``, ``sacct`` (``-D -X`` and
``-c``), ``scancel`` and ``scontrol requeue`` with the same output formats real Slurm gives those exact command
lines (the formats in ``slurm_cli.py``).  Nothing is run: jobs move ``PENDING -> RUNNING -> COMPLETED`` (or
``FAILED``) over *simulated* time, one :meth:`SlurmStandin.advance` per daemon cycle; the timestamps it reports
are real wall-clock times of those transitions, so the executor's identity check (submit time) and the judge's
executor clock see consistent times.

Each job that completes gets a real, signed receipt in its out directory, written as the exec wrapper would: the
per-trial key is read from the key file the controller wrote (and the file deleted, as the wrapper does), the
frozen manifest is echoed unchanged, the clock matches the reported Start/End.  The training numbers are those
of the toy workload (``tests/campaign/toy``: 32 tokens/update, 16-token sequences, the same loss curve on
every run), with a step time of ``base_step_s / speed`` for the launch's ``--speed=`` flag, so the controller's
real ingest (signature, schema, the judge's invariants, observation, cost) does its usual work.  Every
``fail_every``-th job ends ``FAILED`` (exit 1) without a receipt, so the accounting path (``sacct``) is used.

``calls`` counts invocations by command (the executor's ``SlurmCLI.calls`` counts the same from its side).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from infrarsi.verifier import signing
from infrarsi.verifier.receipt import SCHEMA

SLURM_TIME = "%Y-%m-%dT%H:%M:%S"


def _fmt(t: float | None) -> str:
    return time.strftime(SLURM_TIME, time.localtime(t)) if t is not None else "Unknown"


@dataclass
class _Job:
    job_id: str
    name: str
    outdir: Path
    trial_id: str
    argv: list[str]
    submit: float
    submit_step: int
    fails: bool
    state: str = "PENDING"
    start: float | None = None
    end: float | None = None
    end_step: int | None = None
    exit_code: int = 0
    in_queue: bool = True
    reason: str = "Priority"
    extra: dict[str, str] = field(default_factory=dict)


def _opt(words: list[str], name: str) -> str | None:
    """The value of ``name VALUE`` or ``name=VALUE`` in a word list."""
    for i, w in enumerate(words):
        if w == name and i + 1 < len(words):
            return words[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


class SlurmStandin:
    """Simulated Slurm for the executor's runner seam (see the module docstring).

    ``pending_steps``/``running_steps``: how many :meth:`advance` calls a job spends pending / running;
    ``min_job_age_steps``: how many more it stays visible to ``squeue --states=all`` once ended (Slurm's
    MinJobAge), after which only ``sacct`` knows it; ``fail_every``: every n-th job fails (0: none)."""

    def __init__(self, pending_steps: int = 1, running_steps: int = 5, min_job_age_steps: int = 1,
                 fail_every: int = 20, base_step_s: float = 0.08, updates: int = 8, first_id: int = 1000) -> None:
        self.pending_steps = pending_steps
        self.running_steps = running_steps
        self.min_job_age_steps = min_job_age_steps
        self.fail_every = fail_every
        self.base_step_s = base_step_s
        self.updates = updates
        self.step = 0
        self.jobs: dict[str, _Job] = {}
        self.calls: dict[str, int] = {}
        self._next = first_id
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ simulated time
    def advance(self) -> None:
        """One step of simulated time: jobs start, finish (writing receipts) and age out of the queue."""
        with self._lock:
            self.step += 1
            now = time.time()
            for job in self.jobs.values():
                age = self.step - job.submit_step
                if job.state == "PENDING" and age >= self.pending_steps:
                    job.state, job.start, job.reason = "RUNNING", now, "None"
                elif job.state == "RUNNING" and age >= self.pending_steps + self.running_steps:
                    self._finish(job, now)
                elif job.end_step is not None and self.step - job.end_step > self.min_job_age_steps:
                    job.in_queue = False

    def _finish(self, job: _Job, now: float) -> None:
        job.end, job.end_step = now, self.step
        if job.fails:
            job.state, job.exit_code = "FAILED", 1
            (job.outdir / "job.log").write_text("RuntimeError: simulated failure (stand-in)\n")
            return
        job.state, job.exit_code = "COMPLETED", 0
        self._write_receipt(job)

    def _write_receipt(self, job: _Job) -> None:
        """The receipt the exec wrapper would have written for a clean toy run (signed with the trial key)."""
        key_file = _opt(job.argv, "--key-file")
        key = None
        if key_file and os.path.exists(key_file):
            key = signing.read_key_file(key_file)
            os.unlink(key_file)
        manifest: dict[str, str] = {}
        mpath = _opt(job.argv, "--frozen-manifest")
        if mpath and os.path.exists(mpath):
            manifest = json.loads(Path(mpath).read_text())
        speed = 1
        for w in job.argv:
            m = re.fullmatch(r"--speed=(\d+)", w)
            if m:
                speed = int(m.group(1))
        start = float(int(job.start or job.submit))  # Slurm reports whole seconds
        end = max(float(int(job.end or start)), start)
        wall = end - start
        dt = self.base_step_s / speed
        t0 = min(0.05, wall / 4)
        ups = []
        for i in range(1, self.updates + 1):
            jitter = 1 + 0.002 * math.sin(i * 7 + int(job.job_id))
            ups.append({"index": i, "loss": 3.0 / (1 + 0.1 * i), "grad_norm": 1.0 / i, "tokens": 32, "samples": 2,
                        "seq_len": 16, "opt_step": i, "lr": 1e-3, "batch_digest": f"d{i:04d}",
                        "step_time_s": dt * jitter, "peak_mem_gib": None,
                        "phases": {"forward": dt * 0.4, "backward": dt * 0.5, "optimizer": dt * 0.1, "data": 0.0},
                        "wall_t": round(t0 + dt * i, 6)})
        receipt = {
            "schema": SCHEMA, "trial_id": job.trial_id,
            "header": {"model_digest": "toy-model-v1", "params": 1000, "precision": "fp32", "world_size": 1,
                       "tokens_per_update": 32, "seq_len": 16, "versions": {}, "extra": {}, "wall_t": t0},
            "updates": ups,
            "footer": {"completed": self.updates, "wall_t": round(t0 + dt * self.updates + 0.001, 6)},
            "wrapper": {"exit_code": 0, "signal": None, "timed_out": False, "wall_s": wall,
                        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start)),
                        "clock": {"start_unix": start, "end_unix": end},
                        "isolation": {"mode": "bwrap", "detail": "slurm stand-in (benchmark)"},
                        "limits": {"max_receipt_lines": 100000, "max_receipt_bytes": 64 << 20,
                                   "receipt_lines_dropped": 0, "receipt_bytes_dropped": 0, "log_bytes_dropped": 0,
                                   "disk_limit_bytes": None, "disk_used_bytes": 0, "disk_exceeded": False},
                        "oom": None, "errors": [], "bad_lines": 0, "frozen_manifest": manifest,
                        "frozen_before": manifest, "frozen_after": manifest, "memory_cap_gib": None,
                        "argv": job.argv[-4:], "forwarded_signals": []},
        }
        receipt["signature"] = signing.sign(receipt, key) if key else None
        tmp = job.outdir / "receipt.json.tmp"
        tmp.write_text(json.dumps(receipt, sort_keys=True))
        os.replace(tmp, job.outdir / "receipt.json")
        (job.outdir / "job.log").write_text("toy run (stand-in)\n")

    # ------------------------------------------------------------------ the runner seam
    def __call__(self, argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
        argv = list(argv)
        with self._lock:
            self.calls[argv[0]] = self.calls.get(argv[0], 0) + 1
            handler = {"sbatch": self._sbatch, "squeue": self._squeue, "sacct": self._sacct,
                       "scancel": self._scancel, "scontrol": self._scontrol}.get(argv[0])
            if handler is None:
                return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")
            return handler(argv)

    def _ok(self, argv: list[str], out: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.CompletedProcess(argv, 0, out, "")

    def _sbatch(self, argv: list[str]) -> "subprocess.CompletedProcess[str]":
        script = Path(argv[-1])
        text = script.read_text()
        name = re.search(r"^#SBATCH\s+--job-name[= ](\S+)", text, re.M)
        words: list[str] = []
        for line in text.splitlines():
            if "infrarsi.verifier.exec" in line or "--trial-id" in line:
                try:
                    words = shlex.split(line)
                except ValueError:
                    words = line.split()
                break
        job_id = str(self._next)
        self._next += 1
        n = self._next - 1000
        self.jobs[job_id] = _Job(job_id=job_id, name=name.group(1) if name else "", outdir=script.parent,
                                 trial_id=_opt(words, "--trial-id") or "", argv=words, submit=time.time(),
                                 submit_step=self.step, fails=bool(self.fail_every) and n % self.fail_every == 0)
        return self._ok(argv, f"{job_id}\n")

    def _row(self, j: _Job) -> str:
        start = _fmt(j.start) if j.start is not None else "N/A"
        end = _fmt(j.end) if j.end is not None else "N/A"
        return f"{j.job_id}|{j.state}|{_fmt(j.submit)}|{start}|{end}|{j.reason}"

    def _squeue(self, argv: list[str]) -> "subprocess.CompletedProcess[str]":
        ids = _opt(argv, "--jobs")
        name = _opt(argv, "--name")
        if ids is not None:
            rows = [self.jobs[i] for i in ids.split(",") if i in self.jobs and self.jobs[i].in_queue]
        else:
            rows = [j for j in self.jobs.values() if j.in_queue and j.name == name]
        return self._ok(argv, "".join(self._row(j) + "\n" for j in rows))

    def _sacct(self, argv: list[str]) -> "subprocess.CompletedProcess[str]":
        ids = (_opt(argv, "-j") or "").split(",")
        lines = []
        for i in ids:
            j = self.jobs.get(i)
            if j is None or j.end is None:
                continue
            lines.append(f"{j.job_id}|{j.state}|{j.exit_code}:0|{_fmt(j.submit)}|{_fmt(j.start)}|{_fmt(j.end)}")
            lines.append(f"{j.job_id}.batch|{j.state}|{j.exit_code}:0|{_fmt(j.submit)}|{_fmt(j.start)}|{_fmt(j.end)}")
        return self._ok(argv, "".join(line + "\n" for line in lines))

    def _scancel(self, argv: list[str]) -> "subprocess.CompletedProcess[str]":
        j = self.jobs.get(argv[-1])
        if j is None:
            return subprocess.CompletedProcess(argv, 1, "", f"scancel: error: Invalid job id {argv[-1]}")
        if j.end is None:
            j.state, j.end, j.end_step, j.exit_code = "CANCELLED", time.time(), self.step, 0
        return self._ok(argv, "")

    def _scontrol(self, argv: list[str]) -> "subprocess.CompletedProcess[str]":
        return self._ok(argv, "")

    # ------------------------------------------------------------------ reading
    def live(self) -> int:
        """Jobs pending or running now."""
        return sum(1 for j in self.jobs.values() if j.state in ("PENDING", "RUNNING"))
