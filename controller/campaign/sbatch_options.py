"""sbatch habits for ``infrarsi submit``: the common sbatch options, their ``INFRARSI_*`` environment defaults,
validation, admin limits, and how they reach every trial job of a campaign.

Options (each overrides the contract's ``launch`` section and the registered workload, within admin limits):

====================  ====================  ==========================================================
option                environment default   effect on each trial job
====================  ====================  ==========================================================
``-p/--partition``    INFRARSI_PARTITION    ``#SBATCH --partition`` (and the campaign's partition)
``-A/--account``      INFRARSI_ACCOUNT      ``#SBATCH --account``
``--qos``             INFRARSI_QOS          ``#SBATCH --qos``
``-t/--time``         INFRARSI_TIMELIMIT    a trial's time limit (the wrapper's timeout; Slurm's --time
                                            adds a grace minute); any Slurm time format
``--gres``            INFRARSI_GRES         ``#SBATCH --gres`` verbatim; ``gpu[:type]:N`` sets the GPUs
                                            per node (and so torchrun's process count)
``-N/--nodes``        INFRARSI_NODES        nodes per trial (only a multi-node launcher takes more than 1)
``--constraint``      INFRARSI_CONSTRAINT   ``#SBATCH --constraint``
``--exclusive``       INFRARSI_EXCLUSIVE    ``#SBATCH --exclusive``
``--mail-user``       INFRARSI_MAIL_USER    ``#SBATCH --mail-user``
``--mail-type``       INFRARSI_MAIL_TYPE    ``#SBATCH --mail-type`` (NONE, BEGIN, END, FAIL, ALL, ...)
====================  ====================  ==========================================================

The command line wins over the environment, the environment over the contract, as with sbatch's ``SBATCH_*``.
The options are stored with the campaign (``campaigns.sbatch_json``, migration 0007); the contract and its
digest stay as written.  Bad values are refused with one line naming the option (:class:`InfrarsiError`);
``check_with_slurm`` asks Slurm itself (``sbatch --test-only``) whether it would accept them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from infrarsi.controller.contract.model import Contract, Launch, SBATCH_NAME_RE
from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.store.records import WorkloadRecord

#: option name -> environment variable read as its default
ENV_VARS: dict[str, str] = {
    "partition": "INFRARSI_PARTITION", "account": "INFRARSI_ACCOUNT", "qos": "INFRARSI_QOS",
    "time": "INFRARSI_TIMELIMIT", "gres": "INFRARSI_GRES", "nodes": "INFRARSI_NODES",
    "constraint": "INFRARSI_CONSTRAINT", "exclusive": "INFRARSI_EXCLUSIVE", "mail_user": "INFRARSI_MAIL_USER",
    "mail_type": "INFRARSI_MAIL_TYPE",
}
#: options that only a Slurm job has (the local executor cannot honour them)
SLURM_ONLY = ("partition", "account", "qos", "constraint", "exclusive", "mail_user", "mail_type")
MAIL_TYPES = frozenset({"NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
                        "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS"})
_GRES_ITEM = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?::([A-Za-z0-9_.-]+))?(?::(\d+))?$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|\[\]()*:,!-]+$")
_MAIL = re.compile(r"^[A-Za-z0-9_.+-]+(@[A-Za-z0-9.-]+)?$")
_TIMES = (  # Slurm's -t formats -> (days, hours, minutes, seconds) group names present
    (re.compile(r"^(?P<m>\d+)$")),
    (re.compile(r"^(?P<m>\d+):(?P<s>\d+)$")),
    (re.compile(r"^(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$")),
    (re.compile(r"^(?P<d>\d+)-(?P<h>\d+)$")),
    (re.compile(r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)$")),
    (re.compile(r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$")),
)
MAX_TIME_S = 365 * 86400


def parse_sbatch_time(value: str) -> int:
    """Seconds in any Slurm ``-t`` format: ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
    ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``.  InfrarsiError naming ``-t`` for
    anything else, for 0, for UNLIMITED (a trial needs a limit) and for more than 365 days."""
    v = value.strip()
    if v.upper() in ("UNLIMITED", "INFINITE", "-1"):
        raise InfrarsiError(f"-t/--time: {value!r}: a trial needs a time limit")
    for pat in _TIMES:
        m = pat.match(v)
        if m:
            g = {k: int(x) for k, x in m.groupdict().items() if x is not None}
            total = ((g.get("d", 0) * 24 + g.get("h", 0)) * 60 + g.get("m", 0)) * 60 + g.get("s", 0)
            if total <= 0:
                raise InfrarsiError(f"-t/--time: {value!r} must be more than 0 seconds")
            if total > MAX_TIME_S:
                raise InfrarsiError(f"-t/--time: {value!r} is longer than 365 days")
            return total
    raise InfrarsiError(f"-t/--time: {value!r} is not a Slurm time (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                        "D-HH:MM:SS)")


def slurm_time_str(seconds: int) -> str:
    """``D-HH:MM:SS`` (the contract's time format)."""
    d, rem = divmod(int(seconds), 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}"


def gres_gpus(gres: str) -> int | None:
    """GPUs per node a ``--gres`` value asks for (``gpu:4``, ``gpu:h200:2``, ``gpu`` = 1), None without gpu."""
    for item in gres.split(","):
        m = _GRES_ITEM.match(item)
        if m and m.group(1) == "gpu":
            if m.group(3) is not None:
                return int(m.group(3))
            return 1 if m.group(2) is None or not m.group(2).isdigit() else int(m.group(2))
    return None


@dataclass(frozen=True)
class SbatchOptions:
    """The sbatch options of one campaign (None / False: not given)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    gres: str | None = None
    nodes: int | None = None
    constraint: str | None = None
    exclusive: bool = False
    mail_user: str | None = None
    mail_type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The options given (for ``campaigns.sbatch_json``)."""
        return {k: v for k, v in asdict(self).items() if v not in (None, False)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "SbatchOptions":
        """Inverse of :meth:`to_dict`; unknown keys are ignored (a newer writer), None gives no options."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (d or {}).items() if k in names})

    def __bool__(self) -> bool:
        return bool(self.to_dict())

    @property
    def time_limit_s(self) -> int | None:
        return None if self.time is None else parse_sbatch_time(self.time)

    @property
    def gpus_per_node(self) -> int | None:
        return None if self.gres is None else gres_gpus(self.gres)

    def validated(self) -> "SbatchOptions":
        """Self when every value is one Slurm would parse and that renders safely into ``#SBATCH``; otherwise
        InfrarsiError naming the option and what is wrong."""
        for name, flag in (("partition", "-p/--partition"), ("account", "-A/--account"), ("qos", "--qos")):
            v = getattr(self, name)
            if v is not None and (not SBATCH_NAME_RE.match(v) or len(v) > 100 or
                                  (name == "partition" and "=" in v)):
                raise InfrarsiError(f"{flag}: {v!r} is not a name Slurm accepts (letters, digits, _ . - only)")
        if self.time is not None:
            parse_sbatch_time(self.time)
        if self.gres is not None:
            bad = [i for i in self.gres.split(",") if not _GRES_ITEM.match(i)]
            if bad or not self.gres:
                raise InfrarsiError(f"--gres: {self.gres!r} is not name[:type][:count][,...] (e.g. gpu:4 or gpu:h200:2)")
        if self.nodes is not None and not 1 <= int(self.nodes) <= 10_000:
            raise InfrarsiError(f"-N/--nodes: {self.nodes} must be between 1 and 10000")
        if self.constraint is not None and not _CONSTRAINT.match(self.constraint):
            raise InfrarsiError(f"--constraint: {self.constraint!r} has characters Slurm features do not use")
        if self.mail_user is not None and not _MAIL.match(self.mail_user):
            raise InfrarsiError(f"--mail-user: {self.mail_user!r} is not a user name or mail address")
        if self.mail_type is not None:
            unknown = [t for t in self.mail_type.upper().split(",") if t not in MAIL_TYPES]
            if unknown:
                raise InfrarsiError(f"--mail-type: {', '.join(unknown)} is not one of {', '.join(sorted(MAIL_TYPES))}")
        return self

    def launch(self, launch: Launch) -> Launch:
        """``launch`` with these options applied (partition, account, time limit, nodes, GPUs per node)."""
        update: dict[str, Any] = {}
        if self.partition is not None:
            update["partition"] = self.partition
        if self.account is not None:
            update["account"] = self.account
        if self.time is not None:
            update["time_limit"] = slurm_time_str(parse_sbatch_time(self.time))
        if self.nodes is not None:
            update["nodes"] = int(self.nodes)
        if self.gpus_per_node is not None:
            update["gpus_per_node"] = self.gpus_per_node
        return launch.model_copy(update=update) if update else launch

    def directives(self) -> list[str]:
        """The ``#SBATCH`` options these settings add beyond what the trial spec renders itself."""
        out = []
        if self.qos:
            out.append(f"--qos={self.qos}")
        if self.constraint:
            out.append(f"--constraint={self.constraint}")
        if self.exclusive:
            out.append("--exclusive")
        if self.mail_user:
            out.append(f"--mail-user={self.mail_user}")
        if self.mail_type:
            out.append(f"--mail-type={self.mail_type.upper()}")
        return out


def check_limits(opts: SbatchOptions, contract: Contract, workload: WorkloadRecord | None,
                 partition_limits: Mapping[str, int] | None = None) -> None:
    """Refuse, in one line, what exceeds the contract's launcher or the admins' limits: a partition other than
    the registered workload's, a partition whose live-trial limit is 0, more than one node for a single-node
    launcher, more GPUs per node than the workload's contract allows."""
    launch = opts.launch(contract.launch)
    if workload is not None and workload.partition and opts.partition and opts.partition != workload.partition:
        raise InfrarsiError(f"-p/--partition {opts.partition}: workload '{workload.name}' may use partition "
                            f"{workload.partition} only (an admin sets it: infrarsi workload register --partition)")
    if opts.partition and partition_limits and partition_limits.get(opts.partition) == 0:
        raise InfrarsiError(f"-p/--partition {opts.partition}: the admins allow no trials on this partition "
                            "(partition_limits)")
    if launch.nodes > 1 and launch.launcher != "torchrun-multinode":
        raise InfrarsiError(f"-N/--nodes {launch.nodes}: launcher {launch.launcher} runs on one node "
                            "(use launcher: torchrun-multinode in the contract)")
    if workload is not None and opts.gpus_per_node is not None:
        try:
            from infrarsi.controller.campaign.engine import parse_contract_yaml

            allowed = parse_contract_yaml(workload.contract_yaml).launch
        except Exception:  # an unreadable registered contract sets no GPU limit
            return
        if opts.gpus_per_node * launch.nodes > max(allowed.gpus_per_node, 0) * allowed.nodes and allowed.gpus_per_node:
            raise InfrarsiError(f"--gres {opts.gres}: workload '{workload.name}' is registered for "
                                f"{allowed.nodes} node(s) x {allowed.gpus_per_node} GPU(s)")


def check_with_slurm(opts: SbatchOptions, launch: Launch, sbatch: str = "sbatch") -> None:
    """Ask Slurm whether it would accept a trial job with these options (``sbatch --test-only``: nothing is
    queued).  Skipped when ``sbatch`` is not on PATH.  InfrarsiError with Slurm's own one-line reason."""
    exe = shutil.which(sbatch)
    if exe is None:
        return
    argv = [exe, "--test-only", f"--nodes={launch.nodes}", f"--time={slurm_time_str(launch.time_limit_s)}",
            "--job-name=infrarsi-check", "--output=/dev/null", "--wrap=true"]
    if launch.partition:
        argv.append(f"--partition={launch.partition}")
    if launch.account:
        argv.append(f"--account={launch.account}")
    if opts.gres:
        argv.append(f"--gres={opts.gres}")
    elif launch.gpus_per_node > 0:
        argv.append(f"--gres=gpu:{launch.gpus_per_node}")
    argv += [d for d in opts.directives() if not d.startswith("--mail")]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InfrarsiError(f"sbatch --test-only did not answer: {exc}") from None
    if r.returncode != 0:
        lines = [ln.strip() for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
        why = next((ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln), lines[-1] if lines else
                   f"exit {r.returncode}")
        raise InfrarsiError(f"Slurm would not accept these options: {why}")
