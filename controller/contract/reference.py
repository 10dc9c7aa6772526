"""The contract reference (``docs/contract.md``), generated from the pydantic models' field descriptions.

:func:`render_reference` walks :class:`~infrarsi.controller.contract.model.Contract` and every model it nests,
and writes one section per model with one entry per field: its YAML path, type, default, the field's
``description`` (the same text ``infrarsi contract schema`` carries) and an example from :data:`EXAMPLES`.
:func:`missing_docs` lists fields without a description or an example; ``tests/contract/test_reference.py``
fails on any, and when ``docs/contract.md`` differs from :func:`render_reference` (regenerate it with
``infrarsi contract reference > docs/contract.md``).
"""

from __future__ import annotations

import types
import typing
from typing import Any, Iterator

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from infrarsi.controller.contract.checks import KNOWN_PRECISIONS
from infrarsi.controller.contract.model import (
    NO_CAP_GIB, RENDER_STYLES, ConfigApply, Contract, EnvApply, FlagApply, Knob,
)
from infrarsi.controller.contract.scaffold import KNOB_MECHANISMS
from infrarsi.surrogate.noise import MIN_STEPS_PER_RUN

#: what each name in ``precision_menu`` (and the adapter's ``precision=``) means
PRECISION_MEANINGS: dict[str, str] = {
    "fp32": "IEEE float32 everywhere (matmuls without TF32).",
    "tf32": "float32 storage, matmuls/convolutions on TensorFloat-32 cores (torch.backends.*.allow_tf32).",
    "bf16": "parameters and activations in bfloat16 (pure bf16 training).",
    "fp16": "parameters and activations in float16 (pure fp16 training, usually with loss scaling).",
    "fp8": "matmuls in 8-bit floating point (e4m3/e5m2, e.g. Transformer Engine).",
    "amp-bf16": "automatic mixed precision: float32 master weights, autocast to bfloat16 in forward/backward.",
    "amp-fp16": "automatic mixed precision with float16 autocast and a gradient scaler.",
}

#: one YAML example per field path (``knobs[].apply`` style paths; the apply forms under ``knobs[].apply.*``)
EXAMPLES: dict[str, str] = {
    "name": "name: gpt2-small",
    "repo": "repo: .",
    "launch": 'launch:\n  command: "python train.py --max_iters=30 {knobs}"',
    "launch.command": 'command: "python train.py config/train_gpt2.py --max_iters=30 {knobs}"',
    "launch.launcher": "launcher: torchrun",
    "launch.nodes": "nodes: 1",
    "launch.gpus_per_node": "gpus_per_node: 8",
    "launch.partition": "partition: gpu",
    "launch.account": "account: llm-team",
    "launch.time_limit": 'time_limit: "00:30:00"',
    "launch.mem_gb": "mem_gb: 64",
    "launch.cpus_per_task": "cpus_per_task: 16",
    "launch.env": 'env:\n  OMP_NUM_THREADS: "8"',
    "launch.pending_deadline": 'pending_deadline: "01:00:00"',
    "workload": "workload:\n  tokens_per_update: 491520\n  seq_len: 1024",
    "workload.tokens_per_update": "tokens_per_update: 491520   # 12 x 40 sequences x 1024 tokens",
    "workload.seq_len": "seq_len: 1024",
    "workload.static": "static:\n  n_layer: 12\n  vocab_size: 50304",
    "workload.flops_per_token": "flops_per_token: 8.5e8   # 6 x 124M parameters + 12 x 12 x 768 x 1024",
    "trial": "trial:\n  updates: 30\n  window: [11, 30]",
    "trial.updates": "updates: 30",
    "trial.window": "window: [11, 30]",
    "editable_files": "editable_files: [model.py, train.py]",
    "frozen_files": 'frozen_files: [data/prepare.py, "infrarsi*.yaml"]',
    "precision_menu": "precision_menu: [fp32, tf32, amp-bf16]",
    "loss_tolerance": "loss_tolerance: 0.03",
    "memory_cap_gib": "memory_cap_gib: none   # or a number such as 80",
    "knobs": "knobs:\n  - name: compile\n    values: [false, true]\n    reference: false\n"
             "    render: python\n    apply: {flag: \"--compile={value}\"}",
    "knobs[].name": "name: micro_batch",
    "knobs[].values": "values: [4, 8, 16, 32]",
    "knobs[].reference": "reference: 12",
    "knobs[].apply": 'apply: {flag: "--batch_size={value}"}',
    "knobs[].kind": "kind: ordered",
    "knobs[].mechanism": "mechanism: micro_batch",
    "knobs[].batch_factor": "batch_factor: true",
    "knobs[].render": "render: {true: \"True\", false: \"False\"}   # or: render: python",
    "knobs[].priors": "priors:\n  - {value: true, log_speedup: 0.3, spread: 0.2, memory_gib: -1.0}",
    "knobs[].priors[].value": "value: true",
    "knobs[].priors[].log_speedup": "log_speedup: 0.3",
    "knobs[].priors[].spread": "spread: 0.2",
    "knobs[].priors[].memory_gib": "memory_gib: 2.5",
    "knobs[].description": "description: micro-batch size per rank",
    "knobs[].apply.flag": 'apply: {flag: "--dtype {value}"}',
    "knobs[].apply.when_true": "apply: {when_true: --compile, when_false: --no-compile}",
    "knobs[].apply.when_false": 'apply: {when_true: --fused, when_false: ""}',
    "knobs[].apply.env": "apply: {env: NCCL_ALGO}",
    "knobs[].apply.config.file": "apply: {config: {file: config/train.yaml, key: optimizer.fused}}",
    "knobs[].apply.config.key": "apply: {config: {file: conf.json, key: trainer.grad_accum}}",
    "couplings": "couplings:\n  - {product: [micro_batch, grad_accum], equals: 480, times_world_size: true, "
                 "solve: grad_accum}",
    "couplings[].product": "product: [micro_batch, grad_accum]",
    "couplings[].equals": "equals: 480",
    "couplings[].times_world_size": "times_world_size: true",
    "couplings[].solve": "solve: grad_accum",
    "forbid": "forbid:\n  - {compile: true, attention: math}",
    "launch.trial_args": 'trial_args: ["--max_iters=30", "--eval_interval=0", "--log_interval=1"]',
    "launch.trial_env": "trial_env:\n  WANDB_MODE: disabled",
    "proposers": "proposers:\n  entries:\n    - {kind: folder}\n    - {kind: catalog}",
    "proposers.entries": "entries:\n  - {kind: folder, dir: patches}\n  - {kind: llm, name: gpt, base_url: "
                         "https://api.openai.com/v1, model: gpt-4.1, api_key_env: OPENAI_API_KEY}",
    "proposers.prompt_chars": "prompt_chars: 28000",
    "proposers.max_concurrent": "max_concurrent: 2",
    "proposers.entries[kind=folder].kind": "- kind: folder",
    "proposers.entries[kind=folder].name": "name: my-patches",
    "proposers.entries[kind=folder].dir": "dir: patches",
    "proposers.entries[kind=catalog].kind": "- kind: catalog",
    "proposers.entries[kind=catalog].name": "name: catalog",
    "proposers.entries[kind=llm].kind": "- kind: llm",
    "proposers.entries[kind=llm].name": "name: gpt",
    "proposers.entries[kind=llm].base_url": "base_url: http://127.0.0.1:8000/v1",
    "proposers.entries[kind=llm].model": "model: gpt-4.1",
    "proposers.entries[kind=llm].api_key_env": "api_key_env: OPENAI_API_KEY",
    "proposers.entries[kind=llm].temperature": "temperature: 0.2",
    "proposers.entries[kind=llm].max_tokens": "max_tokens: 4096",
    "proposers.entries[kind=llm].budget_tokens": "budget_tokens: 2000000",
    "proposers.entries[kind=llm].budget_usd": "budget_usd: 5",
    "proposers.entries[kind=llm].price_in": "price_in: 2.0",
    "proposers.entries[kind=llm].price_out": "price_out: 8.0",
    "proposers.entries[kind=llm].timeout_s": "timeout_s: 120",
    "proposers.entries[kind=llm].max_retries": "max_retries: 3",
    "proposers.entries[kind=llm].max_concurrent": "max_concurrent: 1",
    "proposers.entries[kind=agent].kind": "- kind: agent",
    "proposers.entries[kind=agent].name": "name: claude",
    "proposers.entries[kind=agent].command": "command: claude -p",
    "proposers.entries[kind=agent].timeout_s": "timeout_s: 600",
    "proposers.entries[kind=agent].max_concurrent": "max_concurrent: 1",
    "proposers.entries[kind=agent].env": "env: [ANTHROPIC_API_KEY]",
    "proposers.entries[kind=agent].network": "network: true",
    "proposers.entries[kind=agent].ro_paths": "ro_paths: [/opt/agent]",
    "inputs": "inputs:\n  - {path: data/shakespeare_char}\n  - {path: /shared/datasets/owt, at: data/owt}",
    "inputs[].path": "path: data/openwebtext",
    "inputs[].at": "at: data/owt",
    "inputs[].digest": "digest: none",
    "budget": "budget:\n  gpu_hours: 4\n  trials: 25",
    "budget.gpu_hours": "gpu_hours: 4.0",
    "budget.trials": "trials: 25",
    "verification": "verification:\n  reference_repeats: 3",
    "verification.reference_repeats": "reference_repeats: 3",
    "verification.rerun_pairs": "rerun_pairs: 2",
    "verification.promotion_candidates": "promotion_candidates: 2",
    "patches": "patches:\n  dir: patches",
    "patches.dir": "dir: patches",
    "patches.max_changed_lines": "max_changed_lines: 200",
}

def _type_name(ann: Any) -> str:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if ann is type(None):
        return "null"
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args]
        if set(names) >= {"boolean", "integer", "number", "string"}:
            rest = [n for n in names if n not in {"boolean", "integer", "number", "string"}]
            return " | ".join(["scalar"] + rest)
        return " | ".join(names)
    if origin is typing.Literal:
        return " | ".join(str(a) for a in args)
    if origin in (list, tuple):
        if origin is tuple:
            return "[" + ", ".join(_type_name(a) for a in args) + "]"
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"mapping {_type_name(args[0])} -> {_type_name(args[1])}"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann.__name__
    return {bool: "boolean", int: "integer", float: "number", str: "string", typing.Any: "any"}.get(ann, str(ann))


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "(all defaults)"
        return f"`{value!r}`".replace("'", "") if value not in ([], {}) else f"`{value!r}`"
    if info.default is PydanticUndefined:
        return "**required**"
    if info.default is None:
        return "none"
    if isinstance(info.default, bool):
        return f"`{str(info.default).lower()}`"
    if isinstance(info.default, tuple):
        return f"`{list(info.default)}`"
    return f"`{info.default}`"


def _sub_models(ann: Any) -> list[type[BaseModel]]:
    """The models a field holds (directly, in a list, optional or any member of a union), in order."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(ann):
        out += [m for m in _sub_models(arg) if m not in out]
    return out


def _kind_of(model: type[BaseModel]) -> str | None:
    """The ``kind`` literal of one member of a discriminated union (``llm`` for LlmSpec), None without one."""
    info = model.model_fields.get("kind")
    args = typing.get_args(info.annotation) if info is not None else ()
    return str(args[0]) if len(args) == 1 else None


def example_of(path: str, info: FieldInfo) -> str | None:
    """The YAML example of a field: :data:`EXAMPLES`, else the first of the field's own ``examples``."""
    if path in EXAMPLES:
        return EXAMPLES[path]
    if info.examples:
        value = info.examples[0]
        return value if isinstance(value, str) else f"{path.rsplit('.', 1)[-1].rstrip('[]')}: {value!r}"
    return None


#: the ``apply`` forms live in an untyped mapping; document them under knobs[].apply
_APPLY_FORMS: list[tuple[str, type[BaseModel]]] = [
    ("knobs[].apply", FlagApply), ("knobs[].apply", EnvApply), ("knobs[].apply.config", ConfigApply)]


def fields() -> Iterator[tuple[str, str, type[BaseModel], FieldInfo]]:
    """Every documented field as ``(path, name, model, info)``, in document order (the nested apply forms after
    the knob fields)."""
    seen: set[str] = set()

    def walk(prefix: str, model: type[BaseModel]) -> Iterator[tuple[str, str, type[BaseModel], FieldInfo]]:
        hints = typing.get_type_hints(model, include_extras=True)
        for name, info in model.model_fields.items():
            path = f"{prefix}{name}"
            if path in seen:  # a field shared by members of a union is documented once
                continue
            seen.add(path)
            yield path, name, model, info
            many = typing.get_origin(hints[name]) is list
            subs = _sub_models(hints[name])
            for sub in subs:
                kind = _kind_of(sub) if len(subs) > 1 else None
                item = f"[kind={kind}]" if kind else "[]"
                yield from walk(f"{path}{item}." if many else f"{path}.", sub)
            if model is Knob and name == "apply":
                for base, form in _APPLY_FORMS:
                    yield from walk(f"{base}.", form)

    yield from walk("", Contract)


def missing_docs() -> list[str]:
    """Fields (dotted paths) with no description or no example; empty when the reference is complete."""
    out = []
    for path, _, _, info in fields():
        if not (info.description or "").strip():
            out.append(f"{path}: no description")
        if example_of(path, info) is None:
            out.append(f"{path}: no example")
    return out


_INTRO = f"""# The task contract (`infrarsi.yaml`): reference

<!-- GENERATED by `infrarsi contract reference > docs/contract.md` from controller/contract/model.py and
controller/contract/reference.py; tests/contract/test_reference.py fails when this file is stale. -->

A contract tells infrarsi how to launch one training job, which launch knobs may change and how each reaches the
script, which files may be patched and which are frozen, and what must stay invariant. `infrarsi contract check
FILE` reports every problem at once (`file:line field: message`) and warns about legal but suspicious settings;
`infrarsi contract schema` prints the JSON Schema with the same descriptions (for editors);
`infrarsi contract scaffold -- python train.py ...` proposes a first contract from the script's argparse or
configurator globals (read, never run).

Unknown fields are errors (a typo such as `refrence:` is reported, not ignored). Paths are relative to the
contract's folder (`repo`) or to the repo (file globs, config files).

## Minimal example

```yaml
name: gpt2-small
launch:
  command: "python train.py config/train_gpt2.py {{knobs}}"      # the production launch
  trial_args: ["--max_iters=30", "--eval_interval=100000"]      # trials only; apply never writes them
  gpus_per_node: 1
workload:
  tokens_per_update: 491520      # batch_size 12 x gradient_accumulation_steps 40 x block_size 1024
  seq_len: 1024
  flops_per_token: 8.5e8
editable_files: [model.py, train.py]
frozen_files: [data/**, configurator.py]
precision_menu: [fp32, tf32, amp-bf16]
memory_cap_gib: none
knobs:
  - name: batch_size
    values: [4, 6, 8, 12, 24]
    reference: 12
    kind: ordered
    batch_factor: true
    mechanism: micro_batch
    apply: {{flag: "--batch_size={{value}}"}}
  - name: gradient_accumulation_steps
    values: [20, 40, 60, 80, 120]
    reference: 40
    kind: ordered
    batch_factor: true
    mechanism: grad_accum
    apply: {{flag: "--gradient_accumulation_steps={{value}}"}}
  - name: compile
    values: [false, true]
    reference: true
    mechanism: graph_compile
    render: python                 # passes --compile=True / --compile=False
    apply: {{flag: "--compile={{value}}"}}
    priors:
      - {{value: false, log_speedup: -0.3, spread: 0.2}}
couplings:
  - {{product: [batch_size, gradient_accumulation_steps], equals: 480, solve: gradient_accumulation_steps}}
forbid:
  - {{compile: true, batch_size: 24}}
```

## How values reach the script

A knob value is passed exactly as written: `values: [4, 8]` gives `--batch_size=4`, strings pass unchanged
(`values: ["True", "False"]` gives `--compile=True`). YAML booleans (`true`/`false`, unquoted) become `true` and
`false` unless the knob has `render`: `render: python` gives `True`/`False`, `render: int` gives `1`/`0`,
`render: lower` keeps `true`/`false` (and silences the warning), and a mapping names the text for each value as
written (`render: {{true: "True", false: "False"}}`, `render: {{bf16: bfloat16}}`). `contract check` warns about
a boolean knob passed through a flag or the environment without `render`. `campaign show`, progress lines and
reports show the rendered text. Config-file knobs (`apply: {{config: ...}}`) are written typed (YAML/JSON
booleans and numbers) and ignore `render`.

## Checks that protect the campaign

* `trial.window` must hold at least {MIN_STEPS_PER_RUN} updates (`surrogate/noise.py` `MIN_STEPS_PER_RUN`: the
  noise calibration splits each reference run's window in halves of two or more).
* Couplings: every legal combination of `batch_factor` knobs keeps `workload.tokens_per_update`. A contract with
  no `batch_factor` knob has its batch fixed in the command: nothing the search changes can change tokens per
  update, and the verifier checks the receipt's count against `workload.tokens_per_update`. A batch size fixed in
  the command next to batch knobs is not counted: make it a `batch_factor` knob with one value.
* `forbid` rules name known knobs and values and may not forbid the reference configuration; the search never
  proposes a configuration that matches one (every knob of the rule at its value, derived knobs included).
* `memory_cap_gib: none` means no cap: the search's memory model treats capacity as unlimited
  (`NO_CAP_GIB`, {int(NO_CAP_GIB):,} GiB) and the wrapper enforces none.
* `knobs[].priors` name values of the knob other than the reference (whose effect is 0 by definition).

## Mechanism names

`knobs[].mechanism` names what a knob changes, in the experience catalog's words
(`controller/experience/mechanisms.py`), so verified results and catalog priors carry over between repositories
that spell the flag differently. `contract scaffold` writes these for what it recognises:
{", ".join(f"`{m}`" for m in KNOB_MECHANISMS)}. A mechanism that names profiled phases instead (`optimizer`,
`forward+backward`) caps the knob's prior by that phase's share of the step (Amdahl); any other text is kept as
written and only groups experience records.

## Scaffold

`infrarsi contract scaffold [-o infrarsi.yaml] [--repo DIR] [--gpus N] -- <launch command>` reads the script's
`argparse` calls, or its module globals when it uses a nanoGPT-style `configurator.py` (`batch_size = 12` at top
level, positional config files and `--key=value` overrides), and writes: knobs for micro-batch x gradient
accumulation (divisors of today's samples per update, coupled with `solve` so tokens per update stay fixed),
precision, compile, attention implementation, fused optimizer, activation checkpointing and tf32; the command
without those flags plus `{{knobs}}`; the run length in `launch.trial_args`; the script and the local modules it
imports as editable (data, config and evaluation modules frozen); `render: python` for configurator booleans; and a
`# TODO:` comment at every guess. `contract check` passes on its output as written.

## Precision names

`precision_menu` lists the precisions a trial may report; the adapter's `precision=` argument (and the HF
callback's) must use the same names. The verifier compares two runs in the lower precision class of the two.

| name | meaning |
| --- | --- |
"""


def render_reference() -> str:
    """The whole of ``docs/contract.md`` as text (deterministic)."""
    out = [_INTRO.rstrip("\n")]
    out += [f"| `{name}` | {PRECISION_MEANINGS[name]} |" for name in sorted(KNOWN_PRECISIONS)]
    out += ["", "Boolean `render` styles: " + ", ".join(
        f"`{k}` ({v[True]}/{v[False]})" for k, v in RENDER_STYLES.items()) + ".", ""]
    out += ["## Fields", "",
            "Each field: its path in the YAML (`[]` marks a list item, `[kind=x]` an item of that kind), type, "
            "default, meaning and an example.", ""]
    sections: dict[str, list[tuple[str, str, type[BaseModel], FieldInfo]]] = {}
    for path, name, model, info in fields():
        head = path.rsplit(".", 1)[0] if "." in path else "(top level)"
        sections.setdefault(head, []).append((path, name, model, info))
    for head, entries in sections.items():
        model = entries[0][2]
        doc = " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())
        out += [f"### `{head}`" if head != "(top level)" else "### Top level", "", doc, ""]
        for path, name, model, info in entries:
            hints = typing.get_type_hints(model, include_extras=True)
            out += [f"#### `{path}`", "",
                    f"*{_type_name(hints[name])}*, default {_default(info)}.", "",
                    " ".join((info.description or "").split()), "",
                    "```yaml", example_of(path, info) or "", "```", ""]
    return "\n".join(out).rstrip("\n") + "\n"


__all__ = ["EXAMPLES", "PRECISION_MEANINGS", "fields", "missing_docs", "render_reference"]
