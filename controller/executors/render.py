"""Rendering of sbatch scripts from :class:`TrialSpec` (a pure function).

Templates live in the ``sbatch_templates`` package (``python.sbatch.j2``,
``torchrun.sbatch.j2``, ``torchrun_multinode.sbatch.j2``) and are loaded with
:mod:`importlib.resources`.  Every value from the spec passes through
:func:`shlex.quote` (the ``q`` / ``qjoin`` filters), env values and argv items
included, so a knob value such as ``$(touch pwned)`` reaches the job verbatim.
Values that end up in ``#SBATCH`` directives (which Slurm parses itself, not
the shell) are validated instead and refused with an :class:`ExecutorError`
naming the field.
"""

from __future__ import annotations

import math
import re
import shlex
from functools import lru_cache
from importlib import resources
from typing import Sequence

import jinja2

from infrarsi.controller.errors import ExecutorError
from infrarsi.controller.executors.base import TrialSpec

TEMPLATES: dict[str, str] = {
    "python": "python.sbatch.j2",
    "torchrun": "torchrun.sbatch.j2",
    "torchrun-multinode": "torchrun_multinode.sbatch.j2",
}

#: seconds Slurm's --time exceeds the wrapper's --timeout, so the wrapper can
#: stop the job itself and still write the receipt
SLURM_TIME_GRACE_S = 60

_NAME_OK = re.compile(r"^[A-Za-z0-9_.+@:=,-]+$")
_PATH_OK = re.compile(r"^[^\s%\"'\\#]+$")
_ENV_NAME_OK = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: a campaign's own #SBATCH option (from ``infrarsi submit``): --name or --name=value, no blanks or quotes
_EXTRA_OK = re.compile(r"^--[a-z][a-z-]*(=[A-Za-z0-9_.+@:=,&|\[\]()*!-]+)?$")


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _qjoin(values: Sequence[object]) -> str:
    return " ".join(shlex.quote(str(v)) for v in values)


class _PackageLoader(jinja2.BaseLoader):
    """Loads templates from the ``sbatch_templates`` package via importlib.resources."""

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, None, object]:
        res = resources.files("infrarsi.sbatch_templates").joinpath(template)
        if not res.is_file():
            raise jinja2.TemplateNotFound(template)
        return res.read_text(encoding="utf-8"), None, lambda: True


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=_PackageLoader(),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
    )
    env.filters["q"] = _q
    env.filters["qjoin"] = _qjoin
    return env


def _check(field: str, value: str, pattern: re.Pattern[str]) -> str:
    if not pattern.match(value):
        raise ExecutorError(f"{field}: {value!r} has characters not allowed in an #SBATCH directive")
    return value


def slurm_time(seconds: int) -> str:
    """``D-HH:MM:SS`` for ``seconds`` rounded up to whole seconds."""
    s = int(math.ceil(seconds))
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}"


def wrapper_argv(spec: TrialSpec, python: str, wrapper: Sequence[str] | None = None) -> list[str]:
    """The exec-wrapper command line (without ``--`` and the job's argv).

    The wrapper is trusted code started as ``python -I -m infrarsi.verifier.exec``: ``-I`` keeps the job's
    tree (the cwd) and ``PYTHONPATH`` off ``sys.path``, so a trial that ships its own ``infrarsi/verifier/exec.py``
    cannot replace it.
    """
    cmd = list(wrapper) if wrapper is not None else [python, "-I", "-m", "infrarsi.verifier.exec"]
    cmd += ["--trial-id", spec.trial_id, "--out", str(spec.outdir)]
    if spec.key_file is not None:
        cmd += ["--key-file", str(spec.key_file)]
    cmd += ["--timeout", str(int(spec.time_limit_s))]
    if spec.frozen_manifest is not None:
        cmd += ["--frozen-manifest", str(spec.frozen_manifest)]
    if spec.memory_cap_gib is not None:
        cmd += ["--memory-cap-gib", repr(float(spec.memory_cap_gib))]
    cmd += ["--cwd", str(spec.workdir), "--src", str(spec.src_dir or spec.workdir)]
    if spec.scratch_dir is not None:
        cmd += ["--scratch", str(spec.scratch_dir)]
    if spec.isolation != "bwrap":
        cmd += ["--isolation", spec.isolation]
    if spec.updates is not None:
        cmd += ["--max-updates", str(int(spec.updates))]
    if spec.disk_limit_gib is not None:
        cmd += ["--disk-limit-gib", repr(float(spec.disk_limit_gib))]
    for host, dest in spec.ro_inputs:
        cmd += ["--ro-input", str(host), str(dest)]
    names = sorted({name for name, _ in spec.env})
    if names:
        cmd += ["--pass-env", ",".join(names)]
    return cmd


def nproc_per_node(spec: TrialSpec) -> int:
    """torchrun's processes per node: ``cpu_ranks`` when set (a CPU smoke), else one per GPU (at least one)."""
    return spec.cpu_ranks if spec.cpu_ranks else max(1, spec.gpus_per_node)


def launch_argv(spec: TrialSpec, python: str) -> list[str]:
    """The job's command under the wrapper for single-node launchers."""
    if spec.launcher == "python":
        return list(spec.argv)
    if spec.launcher == "torchrun":
        nproc = nproc_per_node(spec)
        return [python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                f"--nproc-per-node={nproc}", *spec.argv]
    raise ExecutorError(f"launcher: {spec.launcher!r} needs Slurm (multi-node)")


def sbatch_directives(spec: TrialSpec, extra_sbatch: Sequence[str] = ()) -> list[str]:
    """The ``#SBATCH`` option strings for ``spec`` (validated, in a fixed order)."""
    if spec.launcher != "torchrun-multinode" and spec.nodes != 1:
        raise ExecutorError(f"nodes: launcher {spec.launcher!r} is single-node, got nodes={spec.nodes}")
    safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.trial_id)[:100]
    outdir = _check("outdir", str(spec.outdir), _PATH_OK)
    workdir = _check("workdir", str(spec.workdir), _PATH_OK)
    d = [
        f"--job-name=infrarsi-{safe_id}",
        f"--output={outdir}/slurm-%j.out",
        f"--chdir={workdir}",
        f"--nodes={spec.nodes}",
        "--ntasks-per-node=1",
        f"--time={slurm_time(spec.time_limit_s + SLURM_TIME_GRACE_S)}",
    ]
    if spec.partition:
        d.append(f"--partition={_check('partition', spec.partition, _NAME_OK)}")
    if spec.account:
        d.append(f"--account={_check('account', spec.account, _NAME_OK)}")
    if spec.gres and not spec.cpu_ranks:  # a CPU smoke asks for no GPU
        d.append(f"--gres={_check('gres', spec.gres, _NAME_OK)}")
    elif spec.gpus_per_node > 0:
        d.append(f"--gres=gpu:{int(spec.gpus_per_node)}")
    if spec.mem_gb is not None:
        if spec.mem_gb <= 0:
            raise ExecutorError(f"mem_gb: must be > 0, got {spec.mem_gb}")
        d.append(f"--mem={int(math.ceil(spec.mem_gb * 1024))}M")
    if spec.cpus_per_task is not None:
        if spec.cpus_per_task < 1:
            raise ExecutorError(f"cpus_per_task: must be >= 1, got {spec.cpus_per_task}")
        d.append(f"--cpus-per-task={int(spec.cpus_per_task)}")
    for line in extra_sbatch:
        if "\n" in line or "\r" in line or not line.startswith("-"):
            raise ExecutorError(f"extra_sbatch: {line!r} must be one option starting with '-'")
        d.append(line)
    # the campaign's own options (infrarsi submit) come last: Slurm takes the last of a repeated option, so a
    # researcher's --qos wins over the site's default one
    for line in spec.sbatch_extra:
        if not _EXTRA_OK.match(line):
            raise ExecutorError(f"sbatch_extra: {line!r} must be one --option[=value] without spaces")
        d.append(line)
    return d


def render_sbatch(
    spec: TrialSpec,
    python: str,
    extra_sbatch: Sequence[str] = (),
    wrapper: Sequence[str] | None = None,
) -> str:
    """The sbatch script for ``spec`` (pure: same inputs, same text).

    ``python`` is the interpreter on the compute nodes; ``extra_sbatch`` are
    site options (``--qos=...``) appended as ``#SBATCH`` lines; ``wrapper``
    replaces ``[python, -I, -m, infrarsi.verifier.exec]`` (tests use a stand-in).
    The batch script runs the wrapper outside the sandbox, and the wrapper runs
    the job inside bubblewrap, exactly as on the local executor.
    Raises :class:`ExecutorError` for values that cannot be rendered safely.
    """
    for name, _ in spec.env:
        if not _ENV_NAME_OK.match(name):
            raise ExecutorError(f"env: {name!r} is not a valid environment variable name")
    env = [("INFRARSI_TRIAL_ID", spec.trial_id), *spec.env]
    template = _env().get_template(TEMPLATES[spec.launcher])
    return template.render(
        directives=sbatch_directives(spec, extra_sbatch),
        safe_trial_id=re.sub(r"[^A-Za-z0-9_.-]", "_", spec.trial_id),
        env=env,
        workdir=str(spec.workdir),
        wrapper=wrapper_argv(spec, python, wrapper),
        argv=list(spec.argv),
        python=python,
        nodes=spec.nodes,
        nproc=nproc_per_node(spec),
    )
