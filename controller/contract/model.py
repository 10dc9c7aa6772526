"""The task contract (``infrarsi.yaml``) as pydantic models.

A contract says how to launch a training job, which launch knobs may change
and how each is applied, which source files may be patched and which are
frozen, and what must stay invariant.  Validation here is purely structural
and per-field; cross-field rules (references inside value lists, couplings
that keep tokens per update fixed, globs) live in
:mod:`infrarsi.controller.contract.checks` so every problem is reported at once.

Models are strict: an unknown field is an error (``extra="forbid"``), so a
typo such as ``refrence:`` is reported instead of silently ignored.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

KNOB_PLACEHOLDER = "{knobs}"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_TIME_RE = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")

Scalar = Union[bool, int, float, str]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FlagApply(_Strict):
    """Apply a knob as command-line arguments: ``flag`` is a template with ``{value}``, e.g. ``--micro-batch={value}``.

    A template with a space is split into several arguments (``--dtype {value}``).  An empty string for a
    boolean value may be given through ``when_true``/``when_false`` (e.g. ``when_true: --compile``).
    """

    flag: str | None = None
    when_true: str | None = None
    when_false: str | None = None


class EnvApply(_Strict):
    """Apply a knob as an exported environment variable ``env`` set to the value's string form."""

    env: str

    @field_validator("env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError(f"'{v}' is not a valid environment variable name")
        return v


class ConfigApply(_Strict):
    """Apply a knob by setting ``key`` (dotted path) in the JSON/YAML config ``file`` inside the trial checkout."""

    file: str
    key: str


Apply = Annotated[Union[FlagApply, EnvApply, ConfigApply], Field(union_mode="left_to_right")]


class Knob(_Strict):
    """One launch knob: a named setting with a closed set of allowed values and a reference value."""

    name: str
    values: list[Scalar] = Field(min_length=1)
    reference: Scalar
    apply: dict[str, Any]
    kind: Literal["ordered", "categorical"] = "categorical"
    mechanism: str | None = None
    batch_factor: bool = Field(
        default=False,
        description="True when the value multiplies the samples per optimizer update (micro-batch, grad accumulation).",
    )
    description: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a valid knob name (letters, digits, _ . -)")
        return v

    def applier(self) -> FlagApply | EnvApply | ConfigApply:
        """The parsed ``apply`` block (validated by :mod:`infrarsi.controller.contract.checks`)."""
        return parse_apply(self.apply)


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

    product: list[str] = Field(min_length=1)
    equals: int = Field(gt=0)
    times_world_size: bool = False
    solve: str | None = None


class Launch(_Strict):
    """How a trial is started.  ``command`` is an argv template: a string split with shell rules (never run
    through a shell) where the token ``{knobs}`` is replaced by the flag arguments of the knobs."""

    command: str
    launcher: Literal["python", "torchrun", "torchrun-multinode"] = "python"
    nodes: int = Field(default=1, ge=1)
    gpus_per_node: int = Field(default=0, ge=0)
    partition: str | None = None
    account: str | None = None
    time_limit: str = "00:30:00"
    mem_gb: float | None = Field(default=None, gt=0)
    cpus_per_task: int | None = Field(default=None, ge=1)
    env: dict[str, str] = Field(default_factory=dict)
    pending_deadline: str | None = Field(
        default=None, description="Cancel (and account) a trial still pending after this long, e.g. 01:00:00.")

    @field_validator("time_limit", "pending_deadline")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        if v is not None and not _TIME_RE.match(v):
            raise ValueError(f"'{v}' is not a Slurm time like 00:30:00 or 1-00:00:00")
        return v

    @staticmethod
    def _seconds(value: str) -> int:
        m = _TIME_RE.match(value)
        assert m is not None
        days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds

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

    tokens_per_update: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    static: dict[str, Scalar] = Field(default_factory=dict)


class Trial(_Strict):
    """Updates per trial and the timing window (1-based, inclusive): defaults to updates 11-30 of 30."""

    updates: int = Field(default=30, ge=2)
    window: tuple[int, int] = (11, 30)


class Budget(_Strict):
    """Search budget: GPU-hours over all stages, and the number of search trials."""

    gpu_hours: float = Field(default=10.0, gt=0)
    trials: int = Field(default=25, ge=1)


class Verification(_Strict):
    """Reference repeats for noise calibration, back-to-back re-runs for promotion, and how many candidates
    are re-run."""

    reference_repeats: int = Field(default=3, ge=2)
    rerun_pairs: int = Field(default=2, ge=1)
    promotion_candidates: int = Field(default=2, ge=1)


class Patches(_Strict):
    """Where candidate source patches come from and how big one may be."""

    dir: str | None = None
    max_changed_lines: int = Field(default=200, ge=1)


class Contract(_Strict):
    """The whole task contract.  Paths are relative to the contract file's directory (``repo``) or the repo."""

    name: str
    repo: str = "."
    launch: Launch
    workload: Workload
    trial: Trial = Field(default_factory=Trial)
    editable_files: list[str] = Field(default_factory=list)
    frozen_files: list[str] = Field(default_factory=list)
    precision_menu: list[str] = Field(default_factory=lambda: ["fp32"])
    loss_tolerance: float = Field(default=0.03, gt=0, le=0.5)
    memory_cap_gib: float = Field(default=80.0, gt=0)
    knobs: list[Knob] = Field(default_factory=list)
    couplings: list[Coupling] = Field(default_factory=list)
    budget: Budget = Field(default_factory=Budget)
    verification: Verification = Field(default_factory=Verification)
    patches: Patches = Field(default_factory=Patches)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a valid name (letters, digits, _ . -)")
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
