"""``infrarsi contract scaffold -- <launch command>``: propose a first contract from a training script.

The script is read, never run (:mod:`infrarsi.controller.contract.scaffold_read`).  Settings whose names say what
they do become knobs with canonical ``mechanism`` names (the experience catalog's,
``controller/experience/mechanisms.py``) and a value ladder around the command's current value:

* micro-batch x gradient accumulation: divisors of today's samples per update, with a coupling whose ``solve``
  derives the accumulation so tokens per update stay fixed;
* precision (dtype), compile, attention implementation, fused optimizer, activation checkpointing, tf32.

Every value is written as the script expects it (``render: python`` for configurator-style booleans, so
``--compile=False`` is passed), the reference is the command's current configuration, the recognised flags move
out of the command into ``{knobs}``, the trial length goes to ``launch.trial_args`` and every guess the user must
confirm carries a ``# TODO:`` comment.  The output passes ``contract check`` as it is.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infrarsi.controller.contract.model import Launch
from infrarsi.controller.contract.scaffold_read import UNKNOWN, LaunchCommand, ScriptSettings, Setting, read_launch
from infrarsi.controller.contract.scaffold_read import read_settings
from infrarsi.controller.experience.mechanisms import resolve

#: canonical mechanisms the scaffold turns into knobs (catalog names)
KNOB_MECHANISMS = ("micro_batch", "grad_accum", "mixed_precision", "graph_compile", "attention_kernel",
                   "optimizer_fusion", "activation_checkpointing", "tf32")
#: names the catalog leaves out because they are ambiguous in general, but that mean this in a training script
_EXTRA_ALIASES = {
    "batch_size": "micro_batch", "micro_batch": "micro_batch", "batch": "micro_batch", "bs": "micro_batch",
    "device_batch_size": "micro_batch", "train_batch_size": "micro_batch", "microbatch": "micro_batch",
    "grad_accum": "grad_accum", "accum": "grad_accum", "accumulation_steps": "grad_accum",
    "grad_acc": "grad_accum", "flash": "attention_kernel", "sdpa": "attention_kernel", "use_sdpa": "attention_kernel",
    "flash_attn": "attention_kernel", "attn": "attention_kernel", "fused": "optimizer_fusion",
    "fused_adamw": "optimizer_fusion", "use_fused": "optimizer_fusion", "fused_optim": "optimizer_fusion",
    "checkpointing": "activation_checkpointing", "grad_ckpt": "activation_checkpointing",
}
SEQ_NAMES = ("block_size", "seq_len", "seq_length", "max_seq_len", "context_length", "sequence_length", "n_ctx",
             "max_length", "ctx_len", "max_seq_length")
LENGTH_NAMES = ("max_iters", "updates", "max_steps", "steps", "num_steps", "train_steps", "total_steps",
                "num_iterations", "iterations", "iters", "max_updates", "n_steps")
TRIAL_ONLY_HINTS = ("eval_interval", "eval_iters", "eval_every", "log_interval", "log_every", "save_interval",
                    "always_save_checkpoint", "wandb_log", "checkpoint_interval", "eval_only", "save_every")
_FROZEN_HINT = re.compile(r"data|dataset|prepare|tokeni[sz]|configurator|eval|bench", re.I)
_FAMILIES = {
    "mixed_precision": (("float32", "bfloat16", "float16"), ("fp32", "bf16", "fp16"), ("32", "bf16-mixed", "16-mixed"),
                        ("fp32", "amp-bf16", "amp-fp16")),
    "attention_kernel": (("naive", "sdpa", "flash"), ("eager", "sdpa", "flash_attention_2"),
                         ("math", "flash", "mem_efficient")),
    "optimizer_fusion": (("loop", "foreach", "fused"),),
}
_PRECISION_NAME = {"float32": "fp32", "fp32": "fp32", "32": "fp32", "bfloat16": "amp-bf16", "bf16": "amp-bf16",
                   "bf16-mixed": "amp-bf16", "amp-bf16": "amp-bf16", "float16": "amp-fp16", "fp16": "amp-fp16",
                   "16-mixed": "amp-fp16", "amp-fp16": "amp-fp16"}
UPDATES = 30
WINDOW = (11, 30)
MAX_BATCH_VALUES = 7


@dataclass
class KnobDraft:
    """A knob being written: its fields as YAML-ready values plus ``todo`` comments."""

    name: str
    mechanism: str
    values: list[Any]
    reference: Any
    apply: dict[str, str]
    kind: str = "categorical"
    batch_factor: bool = False
    render: str | dict[str, str] | None = None
    todo: list[str] = field(default_factory=list)
    setting: Setting | None = None


def role_of(name: str) -> str | None:
    """The canonical mechanism a setting's name says it controls (one of :data:`KNOB_MECHANISMS`), or None."""
    key = name.strip().lower().replace("-", "_").lstrip("_")
    mech = _EXTRA_ALIASES.get(key) or resolve(key)
    return mech if mech in KNOB_MECHANISMS else None


def role_of_setting(s: Setting) -> str | None:
    """:func:`role_of` the name, else the role its declared choices reveal (``--optimizer`` with choices
    loop/foreach/fused is the fused optimizer; naive/sdpa/flash an attention implementation)."""
    role = role_of(s.name)
    if role is not None or not s.choices:
        return role
    choices = {str(c) for c in s.choices}
    for mech, families in _FAMILIES.items():
        if mech != "mixed_precision" and any(len(choices & set(f)) >= 2 for f in families):
            return mech
    return None


def _apply_for(s: Setting) -> tuple[dict[str, str], str | dict[str, str] | None, list[str]]:
    """The apply block, render and TODOs that pass this setting's values the way its parser reads them."""
    todo: list[str] = []
    if s.style == "globals":
        render = "python" if s.type == "bool" else None
        return {"flag": f"--{s.name}={{value}}"}, render, todo
    if s.action == "store_true":
        return {"when_true": s.flag, "when_false": ""}, None, todo
    if s.action == "store_false":
        return {"when_true": "", "when_false": s.flag}, None, todo
    if s.action == "BooleanOptionalAction":
        return {"when_true": s.flag, "when_false": "--no-" + s.flag.lstrip("-")}, None, todo
    if s.type == "bool" and s.bool_parser:
        todo.append(f"check that {s.bool_parser}() accepts True/False")
        return {"flag": f"{s.flag}={{value}}"}, "python", todo
    if s.type == "bool":
        todo.append("argparse type=bool treats every non-empty string as True: false is passed as an empty value")
        return {"flag": f"{s.flag}={{value}}"}, {"true": "True", "false": ""}, todo
    return {"flag": f"{s.flag}={{value}}"}, None, todo


def _flip_values(s: Setting) -> list[Any] | None:
    """[reference, other] for a switch: a boolean, or an integer 0/1 (declared choices [0, 1] or a 0/1 value)."""
    v = s.value
    if isinstance(v, bool):
        return [v, not v]
    if isinstance(v, int) and v in (0, 1) and (s.choices in (None, [0, 1], [1, 0])):
        return [v, 1 - v]
    return None


def _ladder(role: str, s: Setting) -> tuple[list[Any], list[str]]:
    """Values to try for a non-batch knob, reference first, and TODOs."""
    if s.choices:
        values = [s.value] + [c for c in s.choices if c != s.value]
        return values, []
    flip = _flip_values(s)
    if flip is not None:
        return flip, []
    if isinstance(s.value, str):
        for family in _FAMILIES.get(role, ()):
            if s.value in family:
                return [s.value] + [v for v in family if v != s.value], [
                    f"values guessed from the usual spellings: remove those {s.flag} does not accept"]
    return [s.value], [f"only the current value is listed: add the other values {s.flag} accepts"]


def _divisor_ladder(total: int, ref: int) -> list[int]:
    """Up to MAX_BATCH_VALUES divisors of ``total`` nearest ``ref`` in log scale (within x/8 .. x8), ascending."""
    divs = [d for d in range(1, total + 1) if total % d == 0 and ref / 8 <= d <= ref * 8]
    divs.sort(key=lambda d: (abs(math.log(d / ref)), d))
    return sorted(set(divs[:MAX_BATCH_VALUES]) | {ref})


@dataclass
class Scaffold:
    """The proposed contract's parts (rendered by :meth:`yaml`)."""

    name: str
    repo: str
    launch: LaunchCommand
    command: str
    gpus_per_node: int
    knobs: list[KnobDraft]
    coupling: dict[str, Any] | None
    seq_len: int
    tokens_per_update: int
    editable: list[str]
    frozen: list[str]
    precision_menu: list[str]
    trial_args: list[str]
    todo_top: list[str]
    todo_workload: list[str]
    style: str
    gpus_given: bool = False

    def yaml(self) -> str:
        """The contract as commented YAML."""
        L: list[str] = [f"# infrarsi.yaml proposed by `infrarsi contract scaffold` from {self.launch.script} "
                        f"({'argparse' if self.style == 'argparse' else 'module globals, configurator style'}).",
                        "# Reference = the command's current values. Review every TODO, then: infrarsi contract "
                        "check infrarsi.yaml", "# Field reference: docs/contract.md"]
        L += [f"# TODO: {t}" for t in self.todo_top]
        L += [f"name: {self.name}", f"repo: {_y(self.repo)}", "launch:", f"  command: {_y(self.command)}",
              f"  launcher: {self.launch.launcher}", f"  gpus_per_node: {self.gpus_per_node}"
              + ("" if self.gpus_given or self.launch.launcher != "python" else "   # TODO: 0 for a CPU-only job"),
              '  time_limit: "00:30:00"']
        if "trial_args" in Launch.model_fields:
            if self.trial_args:
                L.append(f"  trial_args: {_flow(self.trial_args)}   # TODO: trial-only overrides (length, "
                         "evaluation, logging); apply never writes them")
            else:
                L.append("  trial_args: []   # TODO: trial-only overrides, e.g. the number of updates")
        L += ["workload:", f"  tokens_per_update: {self.tokens_per_update}"
              + ("   # samples per update x seq_len" if not self.todo_workload else ""),
              f"  seq_len: {self.seq_len}"]
        L += [f"  # TODO: {t}" for t in self.todo_workload]
        L += ["  # flops_per_token: 8.5e8   # TODO: 6 x parameters + attention FLOPs, for MFU in the report",
              "trial:", f"  updates: {UPDATES}", f"  window: [{WINDOW[0]}, {WINDOW[1]}]",
              f"editable_files: {_flow(self.editable)}", f"frozen_files: {_flow(self.frozen)}",
              f"precision_menu: {_flow(self.precision_menu)}   # the adapter's precision= reports one of these",
              "loss_tolerance: 0.03", "memory_cap_gib: none   # TODO: a number (GiB per GPU) to cap memory"]
        L.append("knobs:" if self.knobs else "knobs: []   # TODO: no setting was recognised; add knobs")
        for k in self.knobs:
            L.append(f"  - name: {k.name}")
            L += [f"    # TODO: {t}" for t in k.todo]
            L += [f"    values: {_flow(k.values)}", f"    reference: {_y(k.reference)}"]
            if k.kind != "categorical":
                L.append(f"    kind: {k.kind}")
            if k.batch_factor:
                L.append("    batch_factor: true")
            L.append(f"    mechanism: {k.mechanism}")
            if k.render is not None:
                L.append(f"    render: {k.render if isinstance(k.render, str) else _flow_map(k.render)}")
            L.append(f"    apply: {_flow_map(k.apply)}")
        if self.coupling:
            c = self.coupling
            L += ["couplings:", f"  - product: {_flow(c['product'])}", f"    equals: {c['equals']}",
                  f"    solve: {c['solve']}"]
        L += ["# forbid:   # TODO: knob combinations the script refuses, e.g.",
              "#   - {compile: true, attention: math}",
              "budget:", "  gpu_hours: 4.0", "  trials: 25"]
        return "\n".join(L) + "\n"


def _y(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def _flow(values: list[Any]) -> str:
    return "[" + ", ".join(_y(v) for v in values) + "]"


def _flow_map(d: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {_y(v)}" for k, v in d.items()) + "}"


def _pick(settings: ScriptSettings, names: tuple[str, ...]) -> Setting | None:
    for n in names:
        for s in settings.settings.values():
            if s.name.lower() == n:
                return s
    return None


def _repo_root(start: Path) -> Path:
    for p in [start, *start.parents]:
        if (p / ".git").exists():
            return p
    return start


def _safe_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "training"
    return name if re.match(r"^[A-Za-z_]", name) else f"job-{name}"


def scaffold(argv: list[str], cwd: Path | None = None, repo: Path | None = None, output: Path | None = None,
             name: str | None = None, gpus: int | None = None) -> Scaffold:
    """Propose a contract for the launch command ``argv`` run in ``cwd`` (default: the current directory).

    ``repo`` is the repository root (default: the git work tree holding the script), ``output`` where the
    contract will be written (``repo:`` is made relative to it; default: the repo root).  ContractError (one line)
    when the command names no readable Python script.
    """
    from infrarsi.controller.errors import ContractError

    cwd = (cwd or Path.cwd()).resolve()
    lc = read_launch(argv)
    script = (cwd / lc.script).resolve()
    if not script.is_file():
        raise ContractError([f"scaffold: the script {lc.script} does not exist (looked in {cwd})"])
    root = (repo or _repo_root(script.parent)).resolve()
    ss = read_settings(script, lc.args, cwd)
    todo_top: list[str] = []
    world = lc.nproc if lc.launcher == "torchrun" else 1

    by_role: dict[str, Setting] = {}
    for s in sorted(ss.settings.values(), key=lambda s: not s.given):  # a setting the command sets comes first
        role = role_of_setting(s)
        if role is not None and role not in by_role:
            by_role[role] = s

    knobs: list[KnobDraft] = []
    coupling = None
    mb, ga = by_role.get("micro_batch"), by_role.get("grad_accum")
    mb_v = mb.value if mb is not None and isinstance(mb.value, int) and not isinstance(mb.value, bool) else None
    ga_v = ga.value if ga is not None and isinstance(ga.value, int) and not isinstance(ga.value, bool) else None
    samples = None
    if mb is not None and mb_v and mb_v > 0:
        apply, render, todo = _apply_for(mb)
        if ga is not None and ga_v and ga_v > 0:
            total = mb_v * ga_v
            ladder = _divisor_ladder(total, mb_v)
            knobs.append(KnobDraft(mb.name, "micro_batch", ladder, mb_v, apply, "ordered", True, render, todo, mb))
            g_apply, g_render, g_todo = _apply_for(ga)
            g_todo = g_todo + ([f"under torchrun check whether {ga.flag} counts all ranks (nanoGPT divides it by the "
                                "world size); the coupling below is per rank"] if world > 1 else [])
            knobs.append(KnobDraft(ga.name, "grad_accum", sorted({total // d for d in ladder}, reverse=True), ga_v,
                                   g_apply, "ordered", True, g_render, g_todo, ga))
            coupling = {"product": [mb.name, ga.name], "equals": total, "solve": ga.name}
            samples = total * world
        else:
            why = (f"{ga.flag} has no literal value (today: {ga.value!r})" if ga is not None else
                   "no gradient-accumulation setting was found")
            knobs.append(KnobDraft(mb.name, "micro_batch", [mb_v], mb_v, apply, "ordered", True, render,
                                   todo + [f"{why}: the batch is fixed at {mb_v}; to search it add the accumulation "
                                           "knob and a coupling (docs/contract.md)"], mb))
            samples = mb_v * world
    elif ga is not None and ga_v:
        todo_top.append(f"no micro-batch setting was recognised; {ga.flag} stays fixed in the command")

    precision_menu = ["fp32"]
    for role in KNOB_MECHANISMS[2:]:
        s = by_role.get(role)
        if s is not None and s.value is UNKNOWN:
            todo_top.append(f"{s.name} ({role}) is computed by the script, not a literal: add a knob for it by "
                            f"hand (apply: {{flag: \"{s.flag}={{value}}\"}})")
        if s is None or s.value is UNKNOWN or s.value is None:
            continue
        values, todo = _ladder(role, s)
        apply, render, apply_todo = _apply_for(s)
        if s.style == "argparse" and isinstance(s.value, bool) and "flag" in apply and render is None:
            render = "python"
        knobs.append(KnobDraft(s.name, role, values, s.value, apply, "categorical", False, render,
                               todo + apply_todo, s))
        if role == "mixed_precision":
            for v in values:
                p = _PRECISION_NAME.get(str(v).lower()) if not isinstance(v, bool) else ("amp-bf16" if v else "fp32")
                if p and p not in precision_menu:
                    precision_menu.append(p)
                elif p is None:
                    todo_top.append(f"precision value {v!r} has no standard name: add its name to precision_menu "
                                    "(docs/contract.md lists them) and report it from the adapter")
        if role == "tf32" and "tf32" not in precision_menu:
            precision_menu.append("tf32")

    seq = _pick(ss, SEQ_NAMES)
    todo_workload: list[str] = []
    if seq is not None and isinstance(seq.value, int) and not isinstance(seq.value, bool) and seq.value > 0:
        seq_len = seq.value
    else:
        seq_len = 1
        todo_workload.append("no sequence-length setting was found: set seq_len (tokens per sample)")
    if samples is None:
        samples = 1
        todo_workload.append("samples per update are unknown (the batch is fixed in the command or computed by the "
                             "script): set tokens_per_update = samples per update x seq_len")
    tokens = samples * seq_len

    knob_names = {k.setting.name for k in knobs if k.setting is not None}
    kept = [a for a, owner in ss.args if owner not in knob_names]
    script_rel = os.path.relpath(script, root)
    head = [] if lc.launcher == "torchrun" else [lc.interpreter]
    command = shlex.join(head + [script_rel] + kept) + " {knobs}"
    if cwd != root:
        todo_top.append(f"trials run in the repository root {root}: check the command's relative paths")

    length = _pick(ss, LENGTH_NAMES)
    trial_args = [f"{length.flag}={UPDATES}"] if length is not None else []
    if length is not None:
        todo_top.append(f"check that {length.flag}={UPDATES} runs exactly trial.updates ({UPDATES}) optimizer updates")
    else:
        todo_top.append(f"no run-length setting was found: make each trial stop after {UPDATES} updates")
    hints = [s.flag for s in ss.settings.values() if s.name.lower() in TRIAL_ONLY_HINTS]
    if hints:
        todo_top.append("trial-only settings to consider for launch.trial_args (evaluation, logging, checkpoints): "
                        + ", ".join(hints))

    editable = [script_rel]
    frozen: list[str] = []
    for mod in ss.imports:
        rel = os.path.relpath(script.parent / mod, root)
        (frozen if _FROZEN_HINT.search(mod) else editable).append(rel)
    for cf in ss.config_files:
        path = (cwd / cf).resolve()
        if path.is_file() and path.is_relative_to(root):
            frozen.append(os.path.relpath(path, root))
    if (script.parent / "configurator.py").is_file():
        rel = os.path.relpath(script.parent / "configurator.py", root)
        if rel not in frozen:
            frozen.append(rel)
    frozen.append("infrarsi*.yaml")
    out_dir = (output.resolve().parent if output is not None else root)
    if not knobs:
        todo_top.append("no knob was recognised; add the launch settings to search (docs/contract.md)")
    return Scaffold(
        name=_safe_name(name or root.name), repo=os.path.relpath(root, out_dir), launch=lc, command=command,
        gpus_per_node=gpus if gpus is not None else (lc.nproc if lc.launcher == "torchrun" else 1),
        knobs=knobs, coupling=coupling, seq_len=seq_len, tokens_per_update=tokens,
        editable=editable, frozen=frozen, precision_menu=precision_menu, trial_args=trial_args, todo_top=todo_top,
        todo_workload=todo_workload, style=ss.style, gpus_given=gpus is not None)
