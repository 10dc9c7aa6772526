"""Execution backends: one interface (:class:`Executor`) at the I/O edge,
with :class:`LocalExecutor` (subprocesses, the embedded default) and
:class:`SlurmExecutor` (sbatch/squeue/sacct/scancel, or pyslurm).

``make_executor("local" | "slurm", **kw)`` builds one by name; the keyword
arguments are those of the chosen class.  Imports are lazy so that importing
this package costs nothing.
"""

from __future__ import annotations

from typing import Any

from infrarsi.controller.errors import ExecutorError
from infrarsi.controller.executors.base import Executor, JobHandle, JobStatus, TrialSpec

__all__ = ["Executor", "JobHandle", "JobStatus", "TrialSpec", "make_executor", "EXECUTORS"]

EXECUTORS = ("local", "slurm")


def make_executor(name: str, **kw: Any) -> Executor:
    """Build the executor called ``name``; ExecutorError for unknown names or bad arguments."""
    if name == "local":
        from infrarsi.controller.executors.local import LocalExecutor as cls
    elif name == "slurm":
        from infrarsi.controller.executors.slurm import SlurmExecutor as cls  # type: ignore[assignment]
    else:
        raise ExecutorError(f"executor: unknown executor {name!r} (expected one of {', '.join(EXECUTORS)})")
    try:
        return cls(**kw)
    except TypeError as exc:
        raise ExecutorError(f"executor: bad settings for {name!r}: {exc}") from exc
