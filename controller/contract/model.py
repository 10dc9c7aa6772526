"""The task contract (``infrarsi.yaml``) as pydantic models.

A contract says how to launch a training job, which launch knobs may change
and how each is applied, which source files may be patched and which are
frozen, and what must stay invariant.  Validation here is purely structural
and per-field; cross-field rules (references inside value lists, couplings
that keep tokens per update fixed, globs) live in
:mod:`infrarsi.controller.contract.checks` so every problem is reported at once.

Models are strict: an unknown field is an error (``extra="forbid"``), so a
typo such as ``refrence:`` is reported instead of silently ignored.

Limits: every count, length and magnitude is bounded (the ``MAX_*`` constants), so a contract that passes here
fits the database columns it lands in and cannot make a later stage slow; floats must be finite.  Values that the
executors would refuse later (an environment variable name, an ``#SBATCH`` partition or account, a zero time
limit) are refused here with the executors' own words (``controller/executors/render.py``).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from infrarsi.controller.proposers.spec import ProposersSpec

KNOB_PLACEHOLDER = "{knobs}"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_TIME_RE = re.compile(r"^(?:(\d{1,4})-)?(?:(\d{1,5}):)?(\d{1,6}):(\d{1,6})$")
#: what the executors accept as an environment variable name (render.py, local.py)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: what render.py accepts in an ``#SBATCH`` partition/account value
SBATCH_NAME_RE = re.compile(r"^[A-Za-z0-9_.+@:=,-]+$")

MAX_NAME_CHARS = 100          # campaign/workload names, knob names, partitions (String(100)/(200) columns)
MAX_TEXT_CHARS = 8192         # a command line, a description, an environment value
MAX_PATTERN_CHARS = 1024      # a file glob or a path
MAX_KNOBS = 100
MAX_VALUES = 1000             # values of one knob
MAX_LIST = 1000               # file globs, couplings, env entries, static workload keys
MAX_INT = 2**53               # largest integer anywhere (exact in JSON and a double)
MAX_TRIALS = 100_000          # budget.trials (an INTEGER column)
MAX_UPDATES = 1_000_000
MAX_REPEATS = 100
MAX_TIME_S = 365 * 86400      # time limits and pending deadlines
MAX_GIB = 1_000_000.0         # memory sizes
MAX_GPU_HOURS = 1e7

Scalar = Union[bool, int, float, str]


def _canonical_map(v: Any) -> Any:
    """Knob.canonical keys and values as strings (YAML gives booleans and numbers for unquoted keys)."""
    if not isinstance(v, dict):
        return v
    from infrarsi.controller.experience.mechanisms import value_key

    return {value_key(k): value_key(c) for k, c in v.items()}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def check_scalar(v: Any) -> Any:
    """A knob/static value within limits: integers within +-2**53, strings without NUL of bounded length."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT:
        raise ValueError(f"integer with {len(str(abs(v)))} digits is too large (at most 2**53 in magnitude)")
    if isinstance(v, str):
        if len(v) > MAX_TEXT_CHARS:
            raise ValueError(f"string of {len(v)} characters is too long (at most {MAX_TEXT_CHARS})")
        if "\x00" in v:
            raise ValueError("contains a NUL character")
    return v


def check_env_name(name: str) -> str:
    """``name`` when the executors accept it as an environment variable name; ValueError in their words."""
    if not ENV_NAME_RE.match(name) or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"{name[:MAX_NAME_CHARS]!r} is not a valid environment variable name")
    return name


def check_sbatch_name(value: str) -> str:
    """``value`` when it can be rendered into an ``#SBATCH`` directive; ValueError in render.py's words."""
    if not SBATCH_NAME_RE.match(value) or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{value[:MAX_NAME_CHARS]!r} has characters not allowed in an #SBATCH directive"
                         if len(value) <= MAX_NAME_CHARS else f"longer than {MAX_NAME_CHARS} characters")
    return value


def parse_slurm_time(value: str) -> int:
    """Seconds in a Slurm time ``[D-][HH:]MM:SS``; ValueError naming the problem (format, 0, over 365 days)."""
    m = _TIME_RE.match(value)
    if m is None:
        raise ValueError(f"{value[:40]!r} is not a Slurm time like 00:30:00 or 1-00:00:00")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError(f"{value!r} must be > 0 seconds")
    if total > MAX_TIME_S:
        raise ValueError(f"{value!r} is longer than 365 days")
    return total


class FlagApply(_Strict):
    """Apply a knob as command-line arguments: ``flag`` is a template with ``{value}``, e.g. ``--micro-batch={value}``.

    A template with a space is split into several arguments (``--dtype {value}``).  An empty string for a
    boolean value may be given through ``when_true``/``when_false`` (e.g. ``when_true: --compile``).
    """

    flag: str | None = Field(default=None, description=(
        "Argument template with a {value} placeholder, e.g. --batch_size={value}; split with shell rules, so "
        "'--dtype {value}' gives two arguments. The value is rendered as written (see render)."))
    when_true: str | None = Field(default=None, description=(
        "For boolean knobs: the argument(s) passed when the value is true, e.g. --compile (empty: nothing)."))
    when_false: str | None = Field(default=None, description=(
        "For boolean knobs: the argument(s) passed when the value is false, e.g. --no-compile (empty: nothing)."))


class EnvApply(_Strict):
    """Apply a knob as an exported environment variable ``env`` set to the value's string form."""

    env: str = Field(description="Environment variable set to the rendered value in the trial, e.g. NCCL_ALGO.")

    @field_validator("env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        return check_env_name(v)


class ConfigApply(_Strict):
    """Apply a knob by setting ``key`` (dotted path) in the JSON/YAML config ``file`` inside the trial checkout."""

    file: str = Field(min_length=1, max_length=MAX_PATTERN_CHARS, description=(
        "JSON (.json) or YAML config file, relative to the repo, written in each trial's checkout."))
    key: str = Field(min_length=1, max_length=MAX_NAME_CHARS, description=(
        "Dotted key inside the file set to the knob's value (typed as in YAML), e.g. optimizer.fused."))

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if any(not part for part in v.split(".")):
            raise ValueError(f"{v!r} is not a dotted key like optimizer.lr (empty part)")
        return v


Apply = Annotated[Union[FlagApply, EnvApply, ConfigApply], Field(union_mode="left_to_right")]

#: named ``render`` styles for boolean values (a mapping gives any other spelling)
RENDER_STYLES: dict[str, dict[bool, str]] = {
    "python": {True: "True", False: "False"},
    "lower": {True: "true", False: "false"},
    "int": {True: "1", False: "0"},
}


class KnobPrior(_Strict):
    """What is believed about one knob value before any trial: its effect relative to the reference value."""

    value: Scalar = Field(description="The knob value this prior is about (one of the knob's values).")
    log_speedup: float = Field(default=0.0, ge=-5, le=5, description=(
        "Prior mean of ln(T_reference / T_value): positive means faster than the reference (0.1 is ~10%)."))
    spread: float | None = Field(default=None, gt=0, le=5, description=(
        "Prior SD of that log-speedup (the knob uses the largest spread given; default: the search's 0.10, "
        "never below max(0.02, half the mean))."))
    memory_gib: float | None = Field(default=None, ge=-MAX_GIB, le=MAX_GIB, description=(
        "Prior change of peak memory per GPU in GiB versus the reference value (positive: more memory)."))

    @field_validator("value")
    @classmethod
    def _value(cls, v: Any) -> Any:
        return check_scalar(v)


class Knob(_Strict):
    """One launch knob: a named setting with a closed set of allowed values and a reference value."""

    name: str = Field(max_length=MAX_NAME_CHARS, description=(
        "Knob name (letters, digits, _ . -); the key in configurations, reports and forbid rules."))
    values: list[Scalar] = Field(min_length=1, max_length=MAX_VALUES, description=(
        "Every value the search may try (booleans, numbers or strings), passed exactly as written (see render)."))
    reference: Scalar = Field(description=(
        "The value the job uses today (one of values): the reference configuration every speedup is measured "
        "against."))
    apply: dict[str, Any] = Field(description=(
        "How a value reaches the job: {flag: '--x={value}'} (or when_true/when_false), {env: NAME}, or "
        "{config: {file, key}}."))
    kind: Literal["ordered", "categorical"] = Field(default="categorical", description=(
        "ordered: numeric values where neighbours behave alike (the search steps along them); categorical: "
        "unrelated choices."))
    mechanism: str | None = Field(default=None, max_length=MAX_NAME_CHARS, description=(
        "What the knob changes: a mechanism of the catalog or one of its aliases (micro_batch, grad_accum, "
        "mixed_precision, graph_compile, attention_kernel, optimizer_fusion, activation_checkpointing, tf32, ...; "
        "docs/experience.md), which keys the experience bank. A phase name (optimizer, forward+backward) instead "
        "caps the knob's prior by that phase's Amdahl ceiling."))
    batch_factor: bool = Field(
        default=False,
        description="True when the value multiplies the samples per optimizer update (micro-batch, grad accumulation).",
    )
    render: dict[str, str] | Literal["python", "lower", "int"] | None = Field(default=None, description=(
        "How values become text on the command line or in the environment: a style for booleans (python: "
        "True/False, lower: true/false, int: 1/0) or a mapping from a value as written to its text, e.g. "
        "{true: 'True', false: 'False'}. Default: numbers and strings as written, booleans as true/false."))
    canonical: Annotated[dict[str, str] | None, BeforeValidator(_canonical_map)] = Field(
        default=None, description=(
            "Experience bank: maps a value (as a string; booleans true/false) to its canonical value for the knob's "
            "mechanism, e.g. {fa: flash, '1': 'on'}, so records move between repositories whose flags spell values "
            "differently. Unmapped values are canonical as they are (docs/experience.md)."),
        examples=["canonical: {fa2: flash, eager: naive}"])
    priors: list[KnobPrior] = Field(default_factory=list, max_length=MAX_VALUES, description=(
        "Optional beliefs per value (log_speedup, spread, memory_gib) that seed the time and memory models; "
        "verified experience from earlier campaigns overrides log_speedup."))
    description: str = Field(default="", max_length=MAX_TEXT_CHARS, description="Free text for people.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a valid knob name (letters, digits, _ . -)")
        return v

    @field_validator("reference")
    @classmethod
    def _reference(cls, v: Any) -> Any:
        return check_scalar(v)

    @field_validator("values")
    @classmethod
    def _values(cls, v: list[Any]) -> list[Any]:
        for item in v:
            check_scalar(item)
        return v

    def applier(self) -> FlagApply | EnvApply | ConfigApply:
        """The parsed ``apply`` block (validated by :mod:`infrarsi.controller.contract.checks`)."""
        return parse_apply(self.apply)

    def rendered(self, value: Any) -> str:
        """``value`` as the job receives it (flag or environment text): the ``render`` mapping or style first,
        then booleans as ``true``/``false`` and everything else as written."""
        if isinstance(self.render, dict):
            for key in (str(value), json.dumps(value) if isinstance(value, bool) else None):
                if key is not None and key in self.render:
                    return self.render[key]
        elif isinstance(self.render, str) and isinstance(value, bool):
            return RENDER_STYLES[self.render][value]
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


def parse_apply(raw: dict[str, Any]) -> FlagApply | EnvApply | ConfigApply:
    """Parse an ``apply`` mapping into exactly one of its three forms; raise ValueError naming the problem."""
    if not isinstance(raw, dict):
        raise ValueError("apply must be a mapping with one of: flag, env, config")
    keys = set(raw)
    if keys & {"flag", "when_true", "when_false"}:
        return FlagApply(**raw)
    if "env" in keys:
        return EnvApply(**raw)
    if "config" in keys:
        cfg = raw["config"]
        if not isinstance(cfg, dict) or set(raw) != {"config"}:
            raise ValueError("apply.config must be a mapping {file, key}")
        return ConfigApply(**cfg)
    raise ValueError(f"apply needs one of flag, env, config (got {sorted(keys) or 'nothing'})")


class Coupling(_Strict):
    """A constraint that keeps the workload fixed: the product of ``product`` knobs (times the world size when
    ``times_world_size``) must equal ``equals``.  When ``solve`` names one of the knobs, that knob is derived from
    the others (it is not searched independently)."""

    product: list[str] = Field(min_length=1, max_length=MAX_KNOBS, description=(
        "Names of batch_factor knobs whose values multiply, e.g. [micro_batch, grad_accum]."))
    equals: int = Field(gt=0, le=MAX_INT, description=(
        "The product they must keep (samples per update, or per rank when times_world_size is false)."))
    times_world_size: bool = Field(default=False, description=(
        "Multiply the product by the world size (nodes x gpus_per_node) before comparing with equals."))
    solve: str | None = Field(default=None, description=(
        "One knob of product computed from the others (not searched), e.g. grad_accum = equals / micro_batch."))


class Launch(_Strict):
    """How a trial is started.  ``command`` is an argv template: a string split with shell rules (never run
    through a shell) where the token ``{knobs}`` is replaced by the flag arguments of the knobs."""

    command: str = Field(max_length=MAX_TEXT_CHARS, description=(
        "The training command, split with shell rules but never run through a shell; the argument {knobs} is "
        "replaced by the flag knobs' arguments, e.g. 'python train.py --max_iters=30 {knobs}'."))
    launcher: Literal["python", "torchrun", "torchrun-multinode"] = Field(default="python", description=(
        "python: one process; torchrun: one node, gpus_per_node ranks; torchrun-multinode: nodes >= 2."))
    nodes: int = Field(default=1, ge=1, le=10_000, description="Nodes per trial (above 1 only for torchrun-multinode).")
    gpus_per_node: int = Field(default=0, ge=0, le=64, description=(
        "GPUs per node requested from Slurm (0: a CPU job); also the number of ranks per node."))
    partition: str | None = Field(default=None, description="Slurm partition (#SBATCH --partition); default: the cluster's.")
    account: str | None = Field(default=None, description="Slurm account (#SBATCH --account) charged for trials.")
    time_limit: str = Field(default="00:30:00", description="Slurm time limit of one trial, [D-][HH:]MM:SS.")
    mem_gb: float | None = Field(default=None, gt=0, le=MAX_GIB, description="Host memory per trial in GB (#SBATCH --mem).")
    cpus_per_task: int | None = Field(default=None, ge=1, le=10_000, description="CPUs per task (#SBATCH --cpus-per-task).")
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_LIST, description=(
        "Environment variables exported in every trial (names starting INFRARSI_ are reserved)."))
    pending_deadline: str | None = Field(
        default=None, description="Cancel (and account) a trial still pending after this long, e.g. 01:00:00.")
    trial_args: list[str] = Field(default_factory=list, max_length=MAX_LIST, description=(
        "Trial-only arguments appended to every trial's command after the knobs (each item split with shell rules), "
        "e.g. ['--max_iters=30', '--eval_interval=0', '--log_interval=1']: command is the production launch, so "
        "infrarsi apply and infrarsi.promoted.yaml carry command with the promoted knobs and never these. A script "
        "that keeps the last occurrence of a flag (argparse does) lets them override a value in command."))
    trial_env: dict[str, str] = Field(default_factory=dict, max_length=MAX_LIST, description=(
        "Trial-only environment variables (e.g. WANDB_MODE: disabled), set in trials on top of env and never "
        "written by apply."))

    @field_validator("trial_args")
    @classmethod
    def _trial_args(cls, v: list[str]) -> list[str]:
        import shlex

        for item in v:
            check_scalar(item)
            try:
                shlex.split(item)
            except ValueError as exc:
                raise ValueError(f"{item[:80]!r} cannot be split into arguments ({exc})") from None
        return v

    @field_validator("trial_env")
    @classmethod
    def _trial_env(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            check_env_name(name)
            check_scalar(value)
        return v

    @field_validator("time_limit", "pending_deadline")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        if v is not None:
            parse_slurm_time(v)
        return v

    @field_validator("partition", "account")
    @classmethod
    def _sbatch_name(cls, v: str | None) -> str | None:
        return None if v is None else check_sbatch_name(v)

    @staticmethod
    def _seconds(value: str) -> int:
        return parse_slurm_time(value)

    @property
    def time_limit_s(self) -> int:
        """The time limit in seconds."""
        return self._seconds(self.time_limit)

    @property
    def pending_deadline_s(self) -> int | None:
        """The pending deadline in seconds (None: wait forever)."""
        return None if self.pending_deadline is None else self._seconds(self.pending_deadline)

    @property
    def world_size(self) -> int:
        """Processes taking part in one update (at least 1, also on the CPU)."""
        return max(1, self.nodes * max(1, self.gpus_per_node))


class Workload(_Strict):
    """What one optimizer update processes: these must not change between reference and candidate."""

    tokens_per_update: int = Field(gt=0, le=MAX_INT, description=(
        "Tokens per optimizer update (all ranks): samples per update x seq_len; every legal configuration keeps it."))
    seq_len: int = Field(gt=0, le=MAX_INT, description="Tokens per sample (the sequence length).")
    static: dict[str, Scalar] = Field(default_factory=dict, max_length=MAX_LIST, description=(
        "Other settings that must not change (model size, vocabulary, ...): name -> value, recorded with results."))
    flops_per_token: float | None = Field(default=None, gt=0, le=1e18, description=(
        "Training FLOPs per token (forward + backward, e.g. 6 x parameters + attention) for MFU; when absent the "
        "receipt header's extra.flops_per_token is used, and the report names the source."))

    @field_validator("static")
    @classmethod
    def _static(cls, v: dict[str, Any]) -> dict[str, Any]:
        for item in v.values():
            check_scalar(item)
        return v


class Trial(_Strict):
    """Updates per trial and the timing window (1-based, inclusive): defaults to updates 11-30 of 30."""

    updates: int = Field(default=30, ge=2, le=MAX_UPDATES, description="Optimizer updates each trial runs.")
    window: tuple[int, int] = Field(default=(11, 30), description=(
        "First and last update (1-based, inclusive) whose step times are measured; earlier ones are warm-up. "
        "Must hold at least 4 updates (the noise calibration's minimum)."))


class Budget(_Strict):
    """Search budget: GPU-hours over all stages, and the number of search trials."""

    gpu_hours: float = Field(default=10.0, gt=0, le=MAX_GPU_HOURS, description=(
        "Device-hours the whole campaign may spend (reference, search and verification trials)."))
    trials: int = Field(default=25, ge=1, le=MAX_TRIALS, description="Search trials at most (verification runs extra).")


class Verification(_Strict):
    """Reference repeats for noise calibration, back-to-back re-runs for promotion, and how many candidates
    are re-run."""

    reference_repeats: int = Field(default=3, ge=2, le=MAX_REPEATS, description=(
        "Reference runs in the doctor stage; their spread calibrates the noise (sigma_pair)."))
    rerun_pairs: int = Field(default=2, ge=1, le=MAX_REPEATS, description=(
        "Back-to-back reference/candidate pairs re-run for each promotion candidate."))
    promotion_candidates: int = Field(default=2, ge=1, le=MAX_REPEATS, description=(
        "Best search candidates re-run back to back before one is promoted."))


class Patches(_Strict):
    """Where candidate source patches come from and how big one may be."""

    dir: str | None = Field(default=None, max_length=MAX_PATTERN_CHARS, description=(
        "Folder of candidate source patches (*.patch, unified diffs against the repo), relative to the contract."))
    max_changed_lines: int = Field(default=200, ge=1, le=MAX_UPDATES, description=(
        "Largest patch accepted (added + removed lines)."))


def _none_cap(v: Any) -> Any:
    """``memory_cap_gib: none`` (any case) or null means no cap."""
    return None if v is None or (isinstance(v, str) and v.strip().lower() == "none") else v


class Input(_Strict):
    """A read-only input that is not in git (a data directory, a tokenizer file): every trial sees it at the same
    path, bound read-only over a mount point in its source tree, never copied (controller/campaign/inputs.py)."""

    path: str = Field(min_length=1, max_length=MAX_PATTERN_CHARS, description=(
        "The input on this host: relative to the repo (e.g. data/shakespeare, git-ignored data files included; it "
        "must not be or pass through a symlink leading out of the repo, nor lie under .git), or absolute for shared "
        "cluster storage. Under Slurm the path must be on storage every compute node mounts at the same path (like "
        "INFRARSI_SCRATCH): the exec wrapper runs on the node and refuses a job whose input it cannot see."))
    at: str | None = Field(default=None, max_length=MAX_PATTERN_CHARS, description=(
        "Where the trial sees it, relative to the job's working directory (default: path; an absolute path "
        "defaults to itself). Files the commit has there are hidden by the input, so at must not hold a frozen, "
        "editable or config-knob file. In the bubblewrap sandbox it is a read-only bind (a write fails with "
        "EROFS); with INFRARSI_ISOLATION=none it is a symlink to path (no copy, and nothing stops the unsandboxed "
        "job writing through it)."))
    digest: Literal["lock", "none"] = Field(default="lock", description=(
        "lock: at init record (relpath, size, mtime, ctime, sha256) of every file, read without following links; "
        "before each trial re-check size, mtime and ctime and re-hash only what moved: a changed, missing or new "
        "file fails the "
        "campaign with a line naming it. none: no manifest (the input may change between trials)."))

    @field_validator("path", "at")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None:
            check_scalar(v)
        return v


class Contract(_Strict):
    """The whole task contract.  Paths are relative to the contract file's directory (``repo``) or the repo."""

    name: str = Field(max_length=MAX_NAME_CHARS, description=(
        "Campaign/workload name (letters, digits, _ . -); experience is shared between contracts of one name."))
    repo: str = Field(default=".", min_length=1, max_length=MAX_PATTERN_CHARS, description=(
        "The training repository (a git work tree), relative to this file's folder."))
    launch: Launch = Field(description="How a trial is started (command, launcher, Slurm resources).")
    workload: Workload = Field(description="What one optimizer update processes; fixed across configurations.")
    trial: Trial = Field(default_factory=Trial, description="Length of a trial and its timing window.")
    editable_files: list[str] = Field(default_factory=list, max_length=MAX_LIST, description=(
        "Globs (relative to the repo) of the files patches may change, e.g. ['model.py', 'src/**/*.py']."))
    frozen_files: list[str] = Field(default_factory=list, max_length=MAX_LIST, description=(
        "Globs of files no trial may change (data loading, evaluation); their digests are locked at init."))
    precision_menu: list[str] = Field(default_factory=lambda: ["fp32"], max_length=16, description=(
        "Numeric precisions a trial may report (the adapter's precision= uses the same names): fp32, tf32, bf16, "
        "fp16, fp8, amp-bf16, amp-fp16 (see the precision table)."))
    loss_tolerance: float = Field(default=0.03, gt=0, le=0.5, description=(
        "Largest relative loss difference from the reference a candidate may show and still be verified."))
    memory_cap_gib: Annotated[float | None, BeforeValidator(_none_cap)] = Field(
        default=80.0, gt=0, le=MAX_GIB, description=(
            "Peak memory per GPU a trial may use, in GiB; none: no cap (the device's own memory is the limit)."))
    knobs: list[Knob] = Field(default_factory=list, max_length=MAX_KNOBS, description="The launch knobs the search varies.")
    couplings: list[Coupling] = Field(default_factory=list, max_length=MAX_LIST, description=(
        "Products of batch_factor knobs that must stay fixed so tokens per update do not change."))
    forbid: list[dict[str, Scalar]] = Field(default_factory=list, max_length=MAX_LIST, description=(
        "Knob combinations the script refuses: each a partial assignment {knob: value, ...} that no trial may "
        "match, e.g. [{compile: true, attention: math}]."))
    budget: Budget = Field(default_factory=Budget, description="How much the search may spend.")
    verification: Verification = Field(default_factory=Verification, description="Noise calibration and promotion re-runs.")
    patches: Patches = Field(default_factory=Patches, description="Candidate source patches.")
    inputs: list[Input] = Field(default_factory=list, max_length=MAX_LIST, description=(
        "Read-only inputs not in git that every trial sees at the same path without copying, e.g. "
        "[{path: data/shakespeare}, {path: /shared/datasets/owt, at: data/owt}]; digests locked at init."))
    proposers: ProposersSpec = Field(default_factory=ProposersSpec, description=(
        "Where priors and patches come from: folder (patches.dir, the default), catalog, llm, agent "
        "(docs/proposers.md)."))

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a valid name (letters, digits, _ . -)")
        return v

    @field_validator("forbid")
    @classmethod
    def _forbid(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for rule in v:
            if not rule:
                raise ValueError("an empty forbid rule would forbid everything; name at least one knob")
            for item in rule.values():
                check_scalar(item)
        return v

    def knob(self, name: str) -> Knob:
        """The knob called ``name``; KeyError naming it when absent."""
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(f"unknown knob '{name}'")

    @property
    def derived_knobs(self) -> set[str]:
        """Knobs whose value is solved from a coupling rather than searched."""
        return {c.solve for c in self.couplings if c.solve}

    @property
    def reference_config(self) -> dict[str, Scalar]:
        """Every knob at its reference value."""
        return {k.name: k.reference for k in self.knobs}

    @property
    def search_capacity_gib(self) -> float:
        """The memory capacity the search and its memory model assume: ``memory_cap_gib``, or
        :data:`NO_CAP_GIB` (effectively infinite, but finite for the models) when there is no cap."""
        return NO_CAP_GIB if self.memory_cap_gib is None else float(self.memory_cap_gib)


#: the capacity used for ``memory_cap_gib: none`` (the models need a finite number)
NO_CAP_GIB = MAX_GIB
