"""Turn a knob configuration into what a trial runs: an argv list, exported variables and config-file edits.

Values are never interpolated into a shell string: flag templates are split with shell rules *first* and
``{value}`` is substituted inside each resulting argument, so ``$(touch pwned)`` arrives as data.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infrarsi.controller.contract.checks import complete_config
from infrarsi.controller.contract.model import KNOB_PLACEHOLDER, ConfigApply, Contract, EnvApply, FlagApply
from infrarsi.controller.errors import ContractError, PatchError


@dataclass(frozen=True)
class LaunchPlan:
    """What one trial runs: ``argv`` (no shell), ``env`` to export, ``config_edits`` file -> {dotted key: value}."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    config_edits: dict[str, dict[str, Any]] = field(default_factory=dict)


def config_string(contract: Contract, config: dict[str, Any], sep: str = ", ") -> str:
    """``knob=value`` pairs sorted by knob name, each value as the job receives it (:meth:`Knob.rendered`), so a
    display shows ``compile=False`` only when ``False`` was passed; unknown knobs show their value as written."""
    names = {k.name: k for k in contract.knobs}
    return sep.join(f"{k}={names[k].rendered(v) if k in names else v}" for k, v in sorted(config.items()))


def render_launch(contract: Contract, config: dict[str, Any], trial: bool = False) -> LaunchPlan:
    """The launch plan for ``config`` (completed and checked against the couplings).

    ``trial=False`` (the default) is the production launch that ``pack.yaml``/``infrarsi apply`` write;
    ``trial=True`` appends ``launch.trial_args`` (each split with shell rules) after the whole command and sets
    ``launch.trial_env`` under the knobs' own variables.

    Raises ContractError naming the knob when ``config`` holds an unknown knob or an illegal combination.
    """
    try:
        full = complete_config(contract, config)
    except KeyError as exc:
        raise ContractError([f"config: {exc.args[0]}"]) from None
    if full is None:
        desc = ", ".join(f"{k}={v}" for k, v in sorted(config.items()))
        raise ContractError([f"config: illegal knob combination ({desc}) for contract '{contract.name}'"])
    flags: list[str] = []
    env: dict[str, str] = dict(contract.launch.env)
    if trial:
        env.update(contract.launch.trial_env)
    edits: dict[str, dict[str, Any]] = {}
    for knob in contract.knobs:
        value = full[knob.name]
        app = knob.applier()
        if isinstance(app, FlagApply):
            if isinstance(value, bool) and (app.when_true is not None or app.when_false is not None):
                tmpl = app.when_true if value else app.when_false
                if tmpl:
                    flags.extend(shlex.split(tmpl))
            elif app.flag is not None:
                flags.extend(part.replace("{value}", knob.rendered(value)) for part in shlex.split(app.flag))
        elif isinstance(app, EnvApply):
            env[app.env] = knob.rendered(value)
        elif isinstance(app, ConfigApply):
            edits.setdefault(app.file, {})[app.key] = value
    argv: list[str] = []
    for part in shlex.split(contract.launch.command):
        if part == KNOB_PLACEHOLDER:
            argv.extend(flags)
        else:
            argv.append(part)
    if trial:
        argv.extend(arg for item in contract.launch.trial_args for arg in shlex.split(item))
    return LaunchPlan(argv=tuple(argv), env=tuple(sorted(env.items())), config_edits=edits)


class ConfigEditError(PatchError):
    """A config knob's file cannot be written safely (it leaves the tree); a trial fails, not the campaign."""


def config_target(workdir: Path, rel: str) -> Path:
    """The resolved path ``rel`` names inside ``workdir``; ConfigEditError (one line naming the file and where it
    points) when it is absolute, contains ``..``, is inside ``.git``, or is / lies under a symlink leading out."""
    root = Path(workdir).resolve()
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts or ".git" in parts:
        raise ConfigEditError(f"config file '{rel}' leaves the tree {root} (absolute, '..' or .git)")
    target = (root / rel).resolve()
    if not target.is_relative_to(root) or ".git" in target.relative_to(root).parts:
        raise ConfigEditError(f"config file '{rel}' points to {target}, outside the tree {root}: refusing to "
                              f"write through a symlink")
    return target


def apply_config_edits(workdir: Path, edits: dict[str, dict[str, Any]]) -> None:
    """Write ``edits`` into JSON (``.json``) or YAML config files inside ``workdir`` (created if missing).

    Symlinks are resolved first (:func:`config_target`): a file that is, or lies under, a symlink pointing out
    of ``workdir`` raises ConfigEditError and nothing is written.  The new content is written to a temporary file
    beside the resolved target and renamed over it (a link inside the tree keeps pointing at the edited file).
    """
    targets = {rel: config_target(workdir, rel) for rel in edits}
    for rel, keys in edits.items():
        path = targets[rel]
        try:
            if path.suffix == ".json":
                data = json.loads(path.read_text()) if path.exists() else {}
            else:
                from ruamel.yaml import YAML

                data = YAML(typ="safe").load(path.read_text()) if path.exists() else {}
                data = data or {}
        except Exception as exc:  # JSON, YAML (ruamel errors are not ValueErrors) or I/O: one line
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise ConfigEditError(f"config file '{rel}' cannot be read: {first}") from None
        if not isinstance(data, dict):
            raise ConfigEditError(f"config file '{rel}' does not hold a mapping")
        for dotted, value in keys.items():
            node = data
            parts = dotted.split(".")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = value
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".json":
            text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        else:
            import io

            from ruamel.yaml import YAML

            yaml = YAML(typ="safe")
            yaml.default_flow_style = False
            buf = io.StringIO()
            yaml.dump(data, buf)
            text = buf.getvalue()
        tmp = path.with_name(f".{path.name}.infrarsi-tmp")
        tmp.unlink(missing_ok=True)
        tmp.write_text(text)
        os.replace(tmp, path)
