"""Thin, batched wrappers around the Slurm command-line tools.

Works on Slurm 22.05 and 24.11 alike (only long-stable options are used):

* ``sbatch --parsable SCRIPT``                 -> job id
* ``squeue --jobs=ID,ID,... --states=all -h -o FMT``  one call for all live jobs;
  ``--states=all`` keeps finished jobs visible for MinJobAge seconds
* ``sacct -D -X -j IDS --parsable2 --noheader -o ...``  (slurmdbd) or, when
  accounting storage is disabled, ``sacct -c`` which reads the jobcomp file;
  one call for every job that left the queue in this poll
* ``scancel --name=NAME ID``                    (the name guards against a reused id)
* ``scontrol requeue ID``

Every command goes through ``runner`` (default: :func:`run_command`), so tests
can count invocations.  Failures raise :class:`ExecutorError`.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from infrarsi.controller.errors import ExecutorError

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]

SQUEUE_FORMAT = "%i|%T|%V|%S|%e|%r"
SACCT_FIELDS = "JobID,State,ExitCode,Submit,Start,End"


def run_command(argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
    """Run a Slurm tool with a 60 s timeout; ExecutorError when it cannot be run at all."""
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        raise ExecutorError(f"{argv[0]}: not found on PATH (is Slurm installed?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ExecutorError(f"{argv[0]}: no answer within 60 s (slurmctld down?)") from exc


def parse_time(text: str) -> float | None:
    """Slurm's ``YYYY-MM-DDTHH:MM:SS`` (controller local time) -> unix seconds; None for N/A/Unknown."""
    text = text.strip()
    if not text or text[0] not in "0123456789":
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_exit(text: str) -> tuple[int | None, int | None]:
    """``"1:0"`` -> (1, None); ``"0:9"`` -> (0, 9)."""
    try:
        code, sig = text.strip().split(":", 1)
        c, s = int(code), int(sig)
    except ValueError:
        return None, None
    return c, (s or None)


@dataclass(frozen=True)
class JobRow:
    """One job as Slurm reports it (``exit_code``/``signal`` only from accounting)."""

    job_id: str
    state: str
    submit: float | None
    start: float | None
    end: float | None
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None


def _fail(tool: str, cp: "subprocess.CompletedProcess[str]") -> ExecutorError:
    msg = (cp.stderr or cp.stdout or "").strip().splitlines()
    return ExecutorError(f"{tool} failed (exit {cp.returncode}): {msg[-1] if msg else 'no output'}")


class SlurmCLI:
    """Batched Slurm queries; ``calls`` counts invocations per tool (for tests and metrics)."""

    def __init__(self, runner: Runner | None = None) -> None:
        self.runner: Runner = runner or run_command
        self.acct_mode: str | None = None  # "db" | "comp" once one worked; None: undetected
        self.calls: dict[str, int] = {}

    def _run(self, argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
        self.calls[argv[0]] = self.calls.get(argv[0], 0) + 1
        return self.runner(argv)

    def sbatch(self, script: str) -> str:
        """Submit the script file ``script``; returns the job id."""
        cp = self._run(["sbatch", "--parsable", script])
        if cp.returncode != 0:
            raise _fail("sbatch", cp)
        job_id = cp.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise ExecutorError(f"sbatch: unexpected output {cp.stdout.strip()!r}")
        return job_id

    def squeue(self, job_ids: Sequence[str]) -> dict[str, JobRow]:
        """All of ``job_ids`` still known to slurmctld, in one call."""
        if not job_ids:
            return {}
        cp = self._run(["squeue", f"--jobs={','.join(job_ids)}", "--states=all", "-h", "-o", SQUEUE_FORMAT])
        if cp.returncode != 0:
            if "Invalid job id" in (cp.stderr or ""):
                return {}  # a single unknown id makes squeue fail; none of them is queued
            raise _fail("squeue", cp)
        return self._parse_squeue(cp.stdout)

    def squeue_by_name(self, name: str) -> list[JobRow]:
        """Jobs (any state still in memory) named ``name``, in one call."""
        cp = self._run(["squeue", f"--name={name}", "--states=all", "-h", "-o", SQUEUE_FORMAT])
        if cp.returncode != 0:
            raise _fail("squeue", cp)
        return [r for r in self._parse_squeue(cp.stdout).values()]

    @staticmethod
    def _parse_squeue(text: str) -> dict[str, JobRow]:
        rows: dict[str, JobRow] = {}
        for line in text.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 6:
                continue
            rows[parts[0]] = JobRow(job_id=parts[0], state=parts[1], submit=parse_time(parts[2]),
                                    start=parse_time(parts[3]), end=parse_time(parts[4]), reason=parts[5])
        return rows

    def accounting(self, job_ids: Sequence[str]) -> dict[str, list[JobRow]]:
        """Records of finished jobs from slurmdbd (``sacct``) or the jobcomp file
        (``sacct -c``), one call; several records per id when Slurm reused it."""
        if not job_ids:
            return {}
        ids = ",".join(job_ids)
        modes = [self.acct_mode] if self.acct_mode else ["db", "comp"]
        for mode in modes:
            base = ["sacct", "-D", "-X"] if mode == "db" else ["sacct", "-c"]
            cp = self._run([*base, "-j", ids, "--parsable2", "--noheader", "-o", SACCT_FIELDS])
            if cp.returncode == 0 and not (mode == "db" and "disabled" in (cp.stderr or "")):
                self.acct_mode = mode
                return self._parse_acct(cp.stdout)
        # neither works now (no accounting, or slurmdbd down): try both again next time
        self.acct_mode = None
        return {}

    @staticmethod
    def _parse_acct(text: str) -> dict[str, list[JobRow]]:
        out: dict[str, list[JobRow]] = {}
        for line in text.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 6 or "." in parts[0]:
                continue
            code, sig = parse_exit(parts[2])
            out.setdefault(parts[0], []).append(JobRow(
                job_id=parts[0], state=parts[1].split(" ")[0], submit=parse_time(parts[3]),
                start=parse_time(parts[4]), end=parse_time(parts[5]), exit_code=code, signal=sig))
        return out

    def scancel(self, job_id: str, job_name: str | None = None) -> None:
        """Cancel ``job_id`` (only if it still carries ``job_name``, when given)."""
        argv = ["scancel", *( [f"--name={job_name}"] if job_name else []), job_id]
        cp = self._run(argv)
        if cp.returncode != 0 and "Invalid job id" not in (cp.stderr or "") \
                and "already completed" not in (cp.stderr or ""):
            raise _fail("scancel", cp)

    def requeue(self, job_id: str) -> None:
        """Put a preempted / node-failed batch job back into the queue (same id)."""
        cp = self._run(["scontrol", "requeue", job_id])
        if cp.returncode != 0:
            raise _fail("scontrol requeue", cp)
