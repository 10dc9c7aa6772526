"""Build a trial's source tree and its :class:`TrialSpec` from the contract, the scope lock and a candidate.

Each launch gets its own directory ``<campaign workdir>/trials/<key[:16]>/`` holding

* ``src/``: the job's source tree (an export of the locked commit with the candidate's patches and config edits
  applied, no ``.git`` link into the user's repository); read-write inside the sandbox, the job's cwd is in it;
* ``scratch/``: read-write inside the sandbox: HOME, TMPDIR and fresh compile caches (nothing leaks from one trial
  into the next);
* ``out/``: trusted, never visible inside the sandbox: receipt, log, the per-trial key file the wrapper deletes
  on start, the frozen manifest, executor records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from infrarsi.controller.campaign.inputs import mount_points
from infrarsi.controller.contract.launch import render_launch
from infrarsi.controller.campaign.sbatch_options import SbatchOptions
from infrarsi.controller.contract.model import Contract
from infrarsi.controller.executors.base import TrialSpec
from infrarsi.controller.settings import cpu_ranks, isolation_mode
from infrarsi.controller.store.stage_records import Scope, as_scope
from infrarsi.verifier.signing import derive_trial_key

#: set by the exec wrapper to folders inside ``scratch/cache`` (with HOME, TMPDIR, XDG_CACHE_HOME)
CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
DISK_LIMIT_GIB = 20.0


def trial_dirs(workdir: Path, trial_key: str) -> tuple[Path, Path]:
    """``(src, out)`` directories of one launch, named by its trial key (``scratch/`` is their sibling:
    :func:`scratch_dir`)."""
    base = workdir / "trials" / trial_key[:16]
    return base / "src", base / "out"


def scratch_dir(out: Path) -> Path:
    """The launch's ``scratch/`` folder: the sibling of its ``out/``."""
    return out.parent / "scratch"


def write_key_file(out: Path, master_key: bytes, trial_key: str) -> Path:
    """Write the derived per-trial key (mode 0600); the exec wrapper reads and deletes it before the job starts."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "trial.key"
    if path.exists():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(derive_trial_key(master_key, trial_key).hex())
    return path


def build_spec(contract: Contract, scope: Scope | dict[str, Any], config: dict[str, Any], trial_key: str, workdir: Path,
               out: Path, master_key: bytes, partition: str | None,
               sbatch: SbatchOptions | None = None) -> TrialSpec:
    """The TrialSpec for one launch (writes the key file and frozen manifest into ``out``, creates ``scratch/``).

    ``workdir`` is the job's cwd: ``src/`` or a folder inside it (monorepo prefix).  Compile caches, HOME and
    TMPDIR point into ``scratch/`` (set by the wrapper); isolation comes from :func:`isolation_mode`.
    ``sbatch`` (the campaign's ``infrarsi submit`` options) overrides the contract's launch section: partition,
    account, time limit, nodes, GPUs per node (``--gres``), plus its further ``#SBATCH`` options.
    With ``INFRARSI_CPU_RANKS=N`` (:func:`cpu_ranks`, ``infrarsi run --cpu-ranks N``) a ``torchrun`` contract runs
    N CPU processes and asks for no GPU.
    """
    scope = as_scope(scope)
    plan = render_launch(contract, config, trial=True)
    out.mkdir(parents=True, exist_ok=True)
    scratch = scratch_dir(out)
    scratch.mkdir(parents=True, exist_ok=True)
    manifest = out / "frozen.json"
    manifest.write_text(json.dumps(scope.frozen, sort_keys=True))
    env = dict(plan.env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    src = out.parent / "src"
    opts = sbatch or SbatchOptions()
    launch = opts.launch(contract.launch)
    ranks = cpu_ranks() if launch.launcher == "torchrun" else None  # a CPU smoke: N gloo ranks, no GPU
    return TrialSpec(
        trial_id=trial_key,
        workdir=workdir,
        outdir=out,
        argv=plan.argv,
        env=tuple(sorted(env.items())),
        launcher=launch.launcher,
        nodes=launch.nodes,
        gpus_per_node=0 if ranks else launch.gpus_per_node,
        partition=opts.partition or partition or launch.partition,
        account=launch.account,
        time_limit_s=launch.time_limit_s,
        mem_gb=launch.mem_gb,
        cpus_per_task=launch.cpus_per_task,
        key_file=write_key_file(out, master_key, trial_key),
        frozen_manifest=manifest,
        memory_cap_gib=contract.memory_cap_gib,
        pending_deadline_s=launch.pending_deadline_s,
        src_dir=src if (workdir == src or src in Path(workdir).parents) else None,
        scratch_dir=scratch,
        updates=contract.trial.updates,
        disk_limit_gib=DISK_LIMIT_GIB,
        isolation=isolation_mode(),
        ro_inputs=tuple(mount_points(Path(workdir), scope.inputs)),
        gres=opts.gres,
        sbatch_extra=tuple(opts.directives()),
        cpu_ranks=ranks,
    )


def judge_spec_dict(contract: Contract, scope: Scope | dict[str, Any]) -> dict[str, Any]:
    """The contract facts the verifier needs, as a JudgeSpec dict (stored in the scope lock for re-judging)."""
    return {
        "updates": contract.trial.updates,
        "window": list(contract.trial.window),
        "tokens_per_update": contract.workload.tokens_per_update,
        "seq_len": contract.workload.seq_len,
        "tau": contract.loss_tolerance,
        "memory_cap_gib": contract.memory_cap_gib,
        "precision_menu": list(contract.precision_menu),
        "frozen_manifest": dict(as_scope(scope).frozen),
        "static_invariants": sorted(contract.workload.static),
    }
