"""Cross-field contract rules, and the knob algebra that keeps the workload fixed.

:func:`semantic_problems` returns ``(loc, message)`` pairs; the loader turns them into
``file:line field: message`` lines.  :func:`complete_config` and :func:`is_legal` define the legal knob space
the search explores: derived knobs (``couplings[].solve``) are computed, every coupling must hold, and the
resulting tokens per update must equal ``workload.tokens_per_update``.

Everything a later stage would refuse is refused here first, in the same words: environment variable names
(``launch.env`` keys), single-node launchers with ``nodes > 1`` (``controller/executors/render.py``), commands and
flag templates that cannot be split into arguments, empty commands, malformed globs.  Every check is linear in
the contract's size (duplicates by hashing a canonical form; glob expansion stops at :data:`MAX_GLOB_FILES`).
"""

from __future__ import annotations

import itertools
import json
import math
import shlex
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from infrarsi.controller.contract.model import (
    KNOB_PLACEHOLDER, ConfigApply, Contract, EnvApply, FlagApply, check_env_name, check_scalar, parse_apply,
)
from infrarsi.surrogate.noise import MIN_STEPS_PER_RUN

KNOWN_PRECISIONS = {"fp32", "tf32", "bf16", "fp16", "fp8", "amp-bf16", "amp-fp16"}
MAX_ENUMERATION = 200_000
#: a glob that matches more files than this is refused (a contract names a handful of source files)
MAX_GLOB_FILES = 100_000

Loc = tuple[Any, ...]


def _fmt_values(values: list[Any]) -> str:
    shown = ", ".join(str(v) for v in values[:12])
    return "[" + shown + (f", ... ({len(values)} values)" if len(values) > 12 else "") + "]"


def _canonical(v: Any) -> tuple[str, Any]:
    """A hashable key under which two values are equal exactly when :func:`_same` says so."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, (int, float)):
        return ("num", v)  # 1 == 1.0 and hash(1) == hash(1.0)
    return (type(v).__name__, v)


def _same(a: Any, b: Any) -> bool:
    """Value equality that does not confuse True with 1."""
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float))
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b
    )


def _in(value: Any, values: list[Any]) -> bool:
    return any(_same(value, v) for v in values)


def _bad_glob(pattern: str) -> str | None:
    if not pattern.strip():
        return "an empty pattern matches nothing; name a file or a glob like src/**/*.py"
    if "\x00" in pattern:
        return "contains a NUL character"
    for part in pattern.split("/"):
        if "**" in part and part != "**":
            return f"'{pattern}': '**' can only be an entire path component (like src/**/*.py)"
    p = PurePosixPath(pattern)
    if p.is_absolute():
        return f"'{pattern}' must be relative to the repo, not absolute"
    if ".." in p.parts:
        return f"'{pattern}' leaves the repo ('..' is not allowed)"
    return None


def semantic_problems(contract: Contract, base_dir: Path) -> list[tuple[Loc, str]]:
    """Every cross-field problem of a structurally valid contract, in document order."""
    out: list[tuple[Loc, str]] = []
    repo = (base_dir / contract.repo).resolve()
    if not repo.is_dir():
        out.append((("repo",), f"'{contract.repo}' is not a directory (resolved to {repo})"))

    # launch
    try:
        argv = shlex.split(contract.launch.command)
    except ValueError as exc:
        argv = []
        out.append((("launch", "command"), f"cannot be split into arguments: {exc}"))
    else:
        if not [a for a in argv if a != KNOB_PLACEHOLDER]:
            out.append((("launch", "command"), "has no program to run (an empty command)"))
    if contract.launch.launcher == "torchrun-multinode" and contract.launch.nodes < 2:
        out.append((("launch", "nodes"), "launcher torchrun-multinode needs nodes >= 2"))
    if contract.launch.launcher != "torchrun-multinode" and contract.launch.nodes != 1:
        out.append((("launch", "nodes"), f"launcher {contract.launch.launcher!r} is single-node, "
                                         f"got nodes={contract.launch.nodes}"))
    for key, value in contract.launch.env.items():
        for check in (check_env_name, lambda _k: check_scalar(value)):
            try:
                check(key)
            except ValueError as exc:
                out.append((("launch", "env", key), str(exc)))

    # trial window
    start, end = contract.trial.window
    if not (1 <= start <= end <= contract.trial.updates):
        out.append((("trial", "window"), f"[{start}, {end}] must satisfy 1 <= start <= end <= updates ({contract.trial.updates})"))
    elif end - start + 1 < MIN_STEPS_PER_RUN:
        out.append((("trial", "window"), f"[{start}, {end}] holds {end - start + 1} update(s); the noise calibration "
                                         f"needs at least {MIN_STEPS_PER_RUN} (surrogate/noise.py MIN_STEPS_PER_RUN)"))

    # files
    for field in ("editable_files", "frozen_files"):
        for i, pat in enumerate(getattr(contract, field)):
            msg = _bad_glob(pat)
            if msg:
                out.append(((field, i), msg))
    if repo.is_dir():
        try:
            editable = _expand(repo, contract.editable_files)
            for i, pat in enumerate(contract.frozen_files):
                both = sorted(_expand(repo, [pat], "frozen_files", i) & editable)
                if both:
                    out.append((("frozen_files", i), f"'{both[0]}' is both frozen and editable"))
        except _GlobError as exc:
            out.append(((exc.field, exc.index), exc.message))

    if repo.is_dir():
        out.extend(_input_problems(contract, repo))

    for i, prec in enumerate(contract.precision_menu):
        if prec not in KNOWN_PRECISIONS:
            out.append((("precision_menu", i), f"'{prec}' is not a known precision {sorted(KNOWN_PRECISIONS)}"))

    # knobs
    seen: dict[str, int] = {}
    env_names: dict[str, int] = {}
    has_flag = False
    for i, knob in enumerate(contract.knobs):
        if knob.name in seen:
            out.append((("knobs", i, "name"), f"duplicate knob name '{knob.name}' (also knobs[{seen[knob.name]}])"))
        seen.setdefault(knob.name, i)
        first: dict[tuple[str, Any], int] = {}
        for j, v in enumerate(knob.values):
            key = _canonical(v)
            if key in first:
                out.append((("knobs", i, "values", j), f"duplicate value {v!r}"))
            else:
                first[key] = j
        if not _in(knob.reference, knob.values):
            out.append((("knobs", i, "reference"), f"'{knob.reference}' is not one of values {_fmt_values(knob.values)}"))
        out.extend(_prior_problems(i, knob))
        if isinstance(knob.render, dict):
            written = {str(v) for v in knob.values} | {json.dumps(v) for v in knob.values if isinstance(v, bool)}
            for key in knob.render:
                if key not in written:
                    out.append((("knobs", i, "render", key), f"'{key}' is not one of values {_fmt_values(knob.values)}"))
        if knob.canonical:
            from infrarsi.controller.experience.mechanisms import value_key

            keys = {value_key(v) for v in knob.values} | {str(v) for v in knob.values}
            for key in knob.canonical:
                if key not in keys:
                    out.append((("knobs", i, "canonical", key), f"'{key}' is not one of values {_fmt_values(knob.values)}"))
        if knob.kind == "ordered" and not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in knob.values):
            out.append((("knobs", i, "kind"), "an ordered knob needs numeric values"))
        try:
            app = parse_apply(knob.apply)
        except Exception as exc:  # pydantic ValidationError or ValueError
            out.append((("knobs", i, "apply"), _one_line(exc)))
            continue
        if isinstance(app, FlagApply):
            has_flag = True
            for part in ("flag", "when_true", "when_false"):
                template = getattr(app, part)
                if template is None:
                    continue
                try:
                    shlex.split(template)
                except ValueError as exc:
                    out.append((("knobs", i, "apply", part), f"cannot be split into arguments: {exc}"))
            if app.flag is None and app.when_true is None and app.when_false is None:
                out.append((("knobs", i, "apply"), "flag apply needs 'flag', 'when_true' or 'when_false'"))
            if app.flag is not None and "{value}" not in app.flag:
                out.append((("knobs", i, "apply", "flag"), f"'{app.flag}' has no {{value}} placeholder"))
            if app.flag is None and not all(isinstance(v, bool) for v in knob.values):
                out.append((("knobs", i, "apply"), "when_true/when_false need boolean values; use 'flag' with {value}"))
        elif isinstance(app, EnvApply):
            if app.env in env_names:
                out.append((("knobs", i, "apply", "env"), f"variable {app.env} is also set by knobs[{env_names[app.env]}]"))
            env_names.setdefault(app.env, i)
            if app.env in contract.launch.env:
                out.append((("knobs", i, "apply", "env"), f"variable {app.env} is also fixed in launch.env"))
            if app.env.startswith("INFRARSI_"):
                out.append((("knobs", i, "apply", "env"), f"variable {app.env} is reserved for the harness"))
        elif isinstance(app, ConfigApply):
            msg = _bad_glob(app.file)
            if msg:
                out.append((("knobs", i, "apply", "config", "file"), msg))
    if has_flag and argv and KNOB_PLACEHOLDER not in argv:
        out.append((("launch", "command"), f"flag knobs need the {KNOB_PLACEHOLDER} placeholder as its own argument"))
    for key in contract.launch.env:
        if key.startswith("INFRARSI_"):
            out.append((("launch", "env", key), f"variable {key} is reserved for the harness"))

    # couplings and batch conservation
    names = {k.name for k in contract.knobs}
    coupling_ok = True
    for i, c in enumerate(contract.couplings):
        for j, n in enumerate(c.product):
            if n not in names:
                out.append((("couplings", i, "product", j), f"unknown knob '{n}'"))
                coupling_ok = False
            elif not contract.knob(n).batch_factor:
                out.append((("couplings", i, "product", j), f"knob '{n}' is not marked batch_factor: true"))
        if c.solve is not None and c.solve not in c.product:
            out.append((("couplings", i, "solve"), f"'{c.solve}' is not in product {c.product}"))
            coupling_ok = False
    for i, knob in enumerate(contract.knobs):
        if knob.batch_factor and not any(knob.name in c.product for c in contract.couplings) and len(knob.values) > 1:
            out.append((("knobs", i, "values"),
                        f"batch_factor knob '{knob.name}' is in no coupling, so changing it changes tokens per update"))
            coupling_ok = False
        if knob.batch_factor and not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in knob.values):
            out.append((("knobs", i, "values"), "batch_factor values must be positive integers"))
            coupling_ok = False
    if coupling_ok and not any(loc[0] == "knobs" and loc[-1] == "reference" for loc, _ in out):
        out.extend(_conservation_problems(contract))
    out.extend(_forbid_problems(contract))
    return out


def _input_problems(contract: Contract, repo: Path) -> list[tuple[Loc, str]]:
    """What ``init`` would refuse about ``inputs:`` (controller/campaign/inputs.py, the same checks, without hashing
    anything): a missing path, a link leading out of the repo, a path under or holding ``.git``, a special file, an
    ``at`` outside the job's directory or through a symlink, an ``at`` hiding a frozen or editable file, two inputs
    at overlapping places.  The controller's own state is checked at ``init``, where it is known."""
    from infrarsi.controller.campaign.inputs import resolve_input  # the one implementation of the rules
    from infrarsi.controller.errors import ScopeError

    out: list[tuple[Loc, str]] = []
    try:
        locked = sorted(_expand(repo, contract.editable_files) | _expand(repo, contract.frozen_files, "frozen_files"))
    except _GlobError:
        locked = []  # reported by the file checks
    seen: list[tuple[int, str]] = []
    for i, inp in enumerate(contract.inputs):
        try:
            item = resolve_input(repo, inp)
        except ScopeError as exc:
            msg = str(exc).removeprefix("inputs: ")
            out.append((("inputs", i, "at" if "': at '" in msg else "path"), msg))
            continue
        at = item["at"]
        if not Path(at).is_absolute():
            hidden = [f for f in locked if f == at or f.startswith(at.rstrip("/") + "/")]
            if hidden:
                out.append((("inputs", i, "at"), f"'{at}' would hide {hidden[0]}, which trials must take from the "
                                                 f"locked commit (a frozen or editable file)"))
        for j, other in seen:
            a, b = Path(at), Path(other)
            if a == b or a in b.parents or b in a.parents:
                out.append((("inputs", i, "at"), f"'{at}' overlaps inputs[{j}] at '{other}'"))
        seen.append((i, at))
    return out


def _prior_problems(i: int, knob: Any) -> list[tuple[Loc, str]]:
    out: list[tuple[Loc, str]] = []
    seen: set[tuple[str, Any]] = set()
    for j, prior in enumerate(knob.priors):
        if not _in(prior.value, knob.values):
            out.append((("knobs", i, "priors", j, "value"), f"'{prior.value}' is not one of values "
                                                            f"{_fmt_values(knob.values)}"))
        elif _same(prior.value, knob.reference):
            out.append((("knobs", i, "priors", j, "value"), f"'{prior.value}' is the reference value: its "
                                                            "effect is 0 by definition"))
        elif _canonical(prior.value) in seen:
            out.append((("knobs", i, "priors", j, "value"), f"a second prior for value '{prior.value}'"))
        seen.add(_canonical(prior.value))
    return out


def _forbid_problems(contract: Contract) -> list[tuple[Loc, str]]:
    """Forbid rules naming unknown knobs or values, and rules that forbid the reference configuration."""
    out: list[tuple[Loc, str]] = []
    names = {k.name: k for k in contract.knobs}
    for i, rule in enumerate(contract.forbid):
        sound = True
        for name, value in rule.items():
            if name not in names:
                out.append((("forbid", i, name), f"unknown knob '{name}' (knobs: {', '.join(sorted(names)) or 'none'})"))
                sound = False
            elif not _in(value, names[name].values):
                out.append((("forbid", i, name), f"'{value}' is not one of knob '{name}' values "
                                                 f"{_fmt_values(names[name].values)}"))
                sound = False
        if sound and _matches(rule, contract.reference_config):
            out.append((("forbid", i), "forbids the reference configuration (every knob at its reference)"))
    return out


def _matches(rule: dict[str, Any], config: dict[str, Any]) -> bool:
    return all(name in config and _same(config[name], value) for name, value in rule.items())


def forbidden_by(contract: Contract, config: dict[str, Any]) -> int | None:
    """Index of the first ``forbid`` rule that the full ``config`` matches (every knob it names at its value),
    or None when no rule forbids it."""
    for i, rule in enumerate(contract.forbid):
        if _matches(rule, config):
            return i
    return None


def contract_warnings(contract: Contract) -> list[tuple[Loc, str]]:
    """Things that are legal but probably not meant: a boolean knob passed on the command line or in the
    environment without ``render`` becomes ``true``/``false``, which Python scripts often refuse; two values of
    one knob that the experience bank files under one canonical value (:func:`canonical_collisions`)."""
    out: list[tuple[Loc, str]] = []
    for i, knob in enumerate(contract.knobs):
        for mech, canon, a, b in canonical_collisions(knob.name, knob.mechanism, knob.values, knob.canonical):
            out.append((("knobs", i, "values"), f"values {a!r} and {b!r} are both filed as {mech}={canon} in the "
                        f"experience bank, so their records are pooled; to keep them apart give one its own value "
                        f"under canonical: (e.g. canonical: {{{b}: {b}}})"))
        bools = [v for v in knob.values if isinstance(v, bool)]
        if not bools or knob.render is not None:
            continue
        try:
            app = parse_apply(knob.apply)
        except Exception:  # reported as a problem already
            continue
        if isinstance(app, EnvApply) or (isinstance(app, FlagApply) and app.flag is not None):
            how = f"{app.flag}" if isinstance(app, FlagApply) else f"{app.env}=..."
            out.append((("knobs", i, "values"), f"YAML booleans are passed as true/false ({how}); if the script "
                        "expects True/False add render: python, or quote the values ('True')"))
    return out


def canonical_collisions(name: str, mechanism: str | None, values: list[Any],
                         canonical: dict[Any, Any] | None) -> list[tuple[str, str, Any, Any]]:
    """``(mechanism, canonical value, first value, other value)`` for each value of a knob that normalizes to
    the same canonical value as an earlier one.

    Legal (the catalog deliberately pools spellings such as ``fa2``/``fa3`` -> ``flash`` and ``default``/
    ``max-autotune`` -> ``on``), but within one knob it pools two measured states: their effects, priors and
    conflicts are retrieved as one, as selective checkpointing once was under full recompute's ``on``."""
    from infrarsi.controller.experience.mechanisms import canonical_value, mechanism_for

    mech = mechanism_for(name, mechanism)
    first: dict[str, Any] = {}
    out = []
    for v in values:
        c = canonical_value(mech, v, canonical)
        if c in first:
            out.append((mech, c, first[c], v))
        else:
            first[c] = v
    return out


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    if hasattr(exc, "errors"):
        try:
            err = exc.errors()[0]  # type: ignore[attr-defined]
            where = ".".join(str(p) for p in err.get("loc", ()))
            return f"{where + ': ' if where else ''}{err.get('msg', text[0])}".replace("Value error, ", "")
        except Exception:
            pass
    return text[-1] if text else type(exc).__name__


class _GlobError(Exception):
    """A glob that cannot be expanded (invalid for pathlib, or matching too many files)."""

    def __init__(self, field: str, index: int, message: str):
        super().__init__(message)
        self.field, self.index, self.message = field, index, message


def _expand(repo: Path, patterns: list[str], field: str = "editable_files", first_index: int = 0) -> set[str]:
    """Files under ``repo`` matched by ``patterns``; _GlobError after MAX_GLOB_FILES matches or on a bad pattern."""
    files: set[str] = set()
    seen = 0
    for idx, pat in enumerate(patterns):
        if _bad_glob(pat):
            continue
        try:
            for p in repo.glob(pat):
                seen += 1
                if seen > MAX_GLOB_FILES:
                    raise _GlobError(field, first_index + idx, f"'{pat}' matches more than {MAX_GLOB_FILES} paths")
                if p.is_file():
                    files.add(p.relative_to(repo).as_posix())
        except (ValueError, OSError) as exc:
            raise _GlobError(field, first_index + idx, f"'{pat}' cannot be expanded: {exc}") from None
    return files


def samples_per_update(contract: Contract, config: dict[str, Any]) -> int:
    """Samples per optimizer update implied by ``config``: product of batch-factor knobs times the world size."""
    prod = contract.launch.world_size
    for k in contract.knobs:
        if k.batch_factor:
            prod *= int(config[k.name])
    return prod


def _conservation_problems(contract: Contract) -> list[tuple[Loc, str]]:
    out: list[tuple[Loc, str]] = []
    ref = complete_config(contract, contract.reference_config)
    if ref is None or not _config_equal(ref, contract.reference_config):
        out.append((("couplings",), "the reference configuration does not satisfy the couplings"))
        return out
    base = samples_per_update(contract, ref) * contract.workload.seq_len
    batch_knobs = [k for k in contract.knobs if k.batch_factor]
    if not batch_knobs:
        # the batch is fixed in the command: no knob can change tokens per update; the verifier checks the
        # receipt's count against workload.tokens_per_update
        return out
    if base != contract.workload.tokens_per_update:
        factors = " x ".join([f"{k.name}={ref[k.name]}" for k in batch_knobs]
                             + [f"world size {contract.launch.world_size}"])
        out.append((("workload", "tokens_per_update"),
                    f"{contract.workload.tokens_per_update} differs from the reference configuration's {base} "
                    f"(= {factors} x seq_len {contract.workload.seq_len}); a batch size fixed in the command is "
                    f"not counted: make it a batch_factor knob with one value"))
        return out
    total = math.prod(len(k.values) for k in batch_knobs)
    if total > MAX_ENUMERATION:
        out.append((("knobs",), f"{total} batch-factor combinations are too many to check (limit {MAX_ENUMERATION})"))
        return out
    for combo in itertools.product(*(k.values for k in batch_knobs)):
        cfg = dict(contract.reference_config)
        cfg.update({k.name: v for k, v in zip(batch_knobs, combo)})
        if not couplings_hold(contract, cfg):
            continue
        tokens = samples_per_update(contract, cfg) * contract.workload.seq_len
        if tokens != contract.workload.tokens_per_update:
            desc = ", ".join(f"{k.name}={v}" for k, v in zip(batch_knobs, combo))
            out.append((("couplings",), f"legal combination {desc} gives {tokens} tokens per update, "
                        f"not {contract.workload.tokens_per_update}"))
            break
    return out


def _config_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


def couplings_hold(contract: Contract, config: dict[str, Any]) -> bool:
    """True when every coupling's product equals its target for ``config`` (all knobs present)."""
    ws = contract.launch.world_size
    for c in contract.couplings:
        prod = math.prod(int(config[n]) for n in c.product) * (ws if c.times_world_size else 1)
        if prod != c.equals:
            return False
    return True


def complete_config(contract: Contract, config: dict[str, Any]) -> dict[str, Any] | None:
    """Fill knobs missing from ``config`` with references, solve derived knobs, and check legality.

    Returns the full configuration, or None when it is illegal (a value outside a knob's values, a derived
    value that is not an allowed integer, or a coupling that fails).  Unknown knob names raise KeyError.
    """
    known = {k.name for k in contract.knobs}
    for name in config:
        if name not in known:
            raise KeyError(f"unknown knob '{name}'")
    full = {k.name: config.get(k.name, k.reference) for k in contract.knobs}
    ws = contract.launch.world_size
    for c in contract.couplings:
        if c.solve is None:
            continue
        others = math.prod(int(full[n]) for n in c.product if n != c.solve) * (ws if c.times_world_size else 1)
        if others <= 0 or c.equals % others:
            return None
        full[c.solve] = c.equals // others
    for k in contract.knobs:
        if not _in(full[k.name], k.values):
            return None
    if not couplings_hold(contract, full):
        return None
    return full


def is_legal(contract: Contract, config: dict[str, Any]) -> bool:
    """True when ``config`` (possibly partial) completes to a legal configuration that no ``forbid`` rule
    matches (this is the legality the search's space uses)."""
    try:
        full = complete_config(contract, config)
    except KeyError:
        return False
    return full is not None and forbidden_by(contract, full) is None


def legal_configs(contract: Contract) -> Iterator[dict[str, Any]]:
    """Every legal full configuration over the free (non-derived) knobs, in knob-table order."""
    free = [k for k in contract.knobs if k.name not in contract.derived_knobs]
    for combo in itertools.product(*(k.values for k in free)):
        full = complete_config(contract, {k.name: v for k, v in zip(free, combo)})
        if full is not None and forbidden_by(contract, full) is None:
            yield full
