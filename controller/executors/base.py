"""The executor interface: submit a trial, poll all live trials in one batch, cancel.

Two implementations live beside this module: :mod:`infrarsi.controller.executors.local`
(subprocesses on this machine) and :mod:`infrarsi.controller.executors.slurm` (the Slurm
command-line tools).  The campaign engine and the daemon only see the types here.

Contract shared by every executor:

* ``submit(spec)`` starts (or queues) one trial and returns a :class:`JobHandle`
  that is JSON-serialisable (:meth:`JobHandle.to_dict` / :meth:`JobHandle.from_dict`),
  so a daemon can store it and a *new* executor instance can poll it after a restart.
* ``poll(handles)`` returns ``{trial_id: JobStatus}`` for every handle given, using
  one batched query of the backend per call (never one call per job).
* ``cancel(handle)`` stops the trial (the whole process tree / the Slurm job);
  the next poll reports it finished with outcome ``cancelled``.
* ``free_slots()`` is how many more trials could start now (``None``: unknown).

Errors: backend failures raise :class:`infrarsi.controller.errors.ExecutorError` with a
one-line message.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from infrarsi.controller.errors import ExecutorError

Launcher = Literal["python", "torchrun", "torchrun-multinode"]
JobState = Literal["pending", "running", "finished", "lost"]
Outcome = Literal["ok", "oom", "crash", "timeout", "cancelled"]

LAUNCHERS: tuple[str, ...] = ("python", "torchrun", "torchrun-multinode")
RECEIPT_NAME = "receipt.json"
LOG_NAME = "job.log"


@dataclass(frozen=True)
class TrialSpec:
    """Everything needed to launch one trial.

    ``argv`` is the training command as a list (never a shell string); for the
    torchrun launchers ``argv[0]`` is the training script.  ``env`` holds the
    variables to export: they reach the job through the wrapper's ``--pass-env`` (the job's environment is an
    allow-list; nothing else of the controller's environment gets in).  Every value reaches the job as data (shell-quoted in
    sbatch scripts, passed as argv/env to local subprocesses).
    """

    trial_id: str
    workdir: Path
    outdir: Path
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    launcher: str = "python"
    nodes: int = 1
    gpus_per_node: int = 0
    partition: str | None = None
    account: str | None = None
    time_limit_s: int = 1800
    mem_gb: float | None = None
    cpus_per_task: int | None = None
    key_file: Path | None = None
    frozen_manifest: Path | None = None
    memory_cap_gib: float | None = None
    pending_deadline_s: float | None = None
    #: the trial's read-write source tree (``workdir`` lies inside it; default: ``workdir`` itself)
    src_dir: Path | None = None
    #: the trial's read-write scratch folder (HOME, TMPDIR, compile caches; default: a temporary folder)
    scratch_dir: Path | None = None
    #: ``contract.trial.updates``: caps the receipt at updates + 16 lines (None: no cap)
    updates: int | None = None
    #: disk the job may use in src + scratch; the wrapper kills it beyond (None: no limit)
    disk_limit_gib: float | None = 20.0
    #: ``bwrap`` (default) or ``none`` (explicit opt-out: the job runs unsandboxed)
    isolation: str = "bwrap"
    #: torchrun only: this many CPU processes instead of one per GPU (a CPU smoke; ``INFRARSI_CPU_RANKS``)
    cpu_ranks: int | None = None
    #: ``#SBATCH --gres`` verbatim (``infrarsi submit --gres gpu:h200:2``); None: ``gpu:<gpus_per_node>``
    gres: str | None = None
    #: further ``#SBATCH`` options of the campaign (``--qos=``, ``--constraint=``, ``--exclusive``, ``--mail-*``)
    sbatch_extra: tuple[str, ...] = ()
    #: read-only inputs ``(host path, path the job sees)`` (the contract's ``inputs:``; the wrapper's ``--ro-input``)
    ro_inputs: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.trial_id:
            raise ExecutorError("trial_id: must not be empty")
        if self.launcher not in LAUNCHERS:
            raise ExecutorError(f"launcher: {self.launcher!r} is not one of {', '.join(LAUNCHERS)}")
        if not self.argv:
            raise ExecutorError(f"argv: trial {self.trial_id} has an empty command")
        if self.nodes < 1:
            raise ExecutorError(f"nodes: must be >= 1, got {self.nodes}")
        if self.gpus_per_node < 0:
            raise ExecutorError(f"gpus_per_node: must be >= 0, got {self.gpus_per_node}")
        if self.time_limit_s <= 0:
            raise ExecutorError(f"time_limit_s: must be > 0, got {self.time_limit_s}")
        if self.isolation not in ("bwrap", "none"):
            raise ExecutorError(f"isolation: {self.isolation!r} is not one of bwrap, none")
        if self.updates is not None and self.updates < 1:
            raise ExecutorError(f"updates: must be >= 1, got {self.updates}")
        if self.cpu_ranks is not None and (self.cpu_ranks < 1 or self.launcher != "torchrun"):
            raise ExecutorError(f"cpu_ranks: {self.cpu_ranks} needs the torchrun launcher and at least 1 rank "
                                f"(launcher {self.launcher!r})")
        if self.disk_limit_gib is not None and self.disk_limit_gib <= 0:
            raise ExecutorError(f"disk_limit_gib: must be > 0, got {self.disk_limit_gib}")


@dataclass(frozen=True)
class JobHandle:
    """A submitted trial.  The job's identity is ``(job_id, submit_time)`` because
    Slurm reuses job ids; ``outdir`` lets a fresh executor find the trial's files."""

    trial_id: str
    backend: str
    job_id: str
    submit_time: float
    outdir: str = ""

    @property
    def key(self) -> tuple[str, float]:
        """The identity of the job: ``(job_id, submit_time)``."""
        return (self.job_id, self.submit_time)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; :meth:`from_dict` inverts it."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "JobHandle":
        """Rebuild a handle stored with :meth:`to_dict`; raises ExecutorError on missing keys."""
        try:
            return cls(
                trial_id=str(data["trial_id"]),
                backend=str(data["backend"]),
                job_id=str(data["job_id"]),
                submit_time=float(data["submit_time"]),
                outdir=str(data.get("outdir", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ExecutorError(f"job handle: malformed stored handle ({exc})") from exc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


@dataclass(frozen=True)
class JobStatus:
    """What one poll knows about a trial.  ``outcome`` is set iff ``state == "finished"``."""

    handle: JobHandle
    state: str
    outcome: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    receipt_path: Path | None = None
    log_path: Path | None = None
    start_time: float | None = None
    end_time: float | None = None
    gpus: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def finished(self) -> bool:
        return self.state == "finished"


class Executor(ABC):
    """Abstract executor; see the module docstring for the contract."""

    backend: str = "abstract"

    @abstractmethod
    def submit(self, spec: TrialSpec) -> JobHandle:
        """Start or queue one trial; raise ExecutorError if it cannot be submitted."""

    @abstractmethod
    def poll(self, handles: Sequence[JobHandle]) -> dict[str, JobStatus]:
        """Status of every handle, keyed by trial id, from one batched backend query."""

    @abstractmethod
    def cancel(self, handle: JobHandle) -> None:
        """Stop the trial; idempotent (cancelling a finished trial does nothing)."""

    def free_slots(self) -> int | None:
        """How many more trials could start now; ``None`` when unknown or unbounded."""
        return None

    def adopt(self, trial_id: str, outdir: Path) -> JobHandle | None:
        """The handle of a job already launched for ``trial_id`` into ``outdir`` (e.g. by a
        process that died before recording it), or None when there is none."""
        return None

    def next_poll_in(self) -> float:
        """Seconds until polling again is useful (backoff after submits, then steady)."""
        return 0.0
