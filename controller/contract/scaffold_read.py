"""Read a training launch command and its script's settings without running anything (for ``contract scaffold``).

:func:`read_launch` splits a launch command (``python train.py --batch_size=8``, ``torchrun --nproc_per_node=2
train.py ...``, ``python -m torch.distributed.run ...``) into the launcher, the script and the script's arguments.
:func:`read_settings` parses the script's source with :mod:`ast` (never imports or executes it) and finds its
settings in one of two styles:

* ``argparse``: every ``*.add_argument("--name", type=..., default=..., choices=..., action=...)`` call whose
  option strings, default and choices are literals (a non-literal default is recorded as unknown);
* ``globals`` (nanoGPT's ``configurator.py`` style): module-level ``name = <literal>`` assignments, overridden by
  positional config files (``config/train_gpt2.py``, read the same way) and ``--name=value`` arguments whose value
  is a Python literal when it parses as one and a string otherwise.

Then the command's own arguments are applied, so each :class:`Setting` carries the value the command runs with.
Nothing here raises on a strange script: unreadable pieces are skipped (the scaffold marks them ``TODO``).
"""

from __future__ import annotations

import ast
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from infrarsi.controller.errors import ContractError

Style = Literal["argparse", "globals"]
UNKNOWN: Any = type("Unknown", (), {"__repr__": lambda self: "UNKNOWN"})()

_PYTHONS = ("python", "python3")
_TORCHRUN_VALUE_OPTS = {"--nproc_per_node", "--nproc-per-node", "--nnodes", "--node_rank", "--node-rank",
                        "--master_addr", "--master-addr", "--master_port", "--master-port", "--rdzv_backend",
                        "--rdzv-backend", "--rdzv_endpoint", "--rdzv-endpoint", "--rdzv_id", "--rdzv-id",
                        "--max_restarts", "--max-restarts", "--monitor_interval", "--monitor-interval"}


@dataclass(frozen=True)
class LaunchCommand:
    """A launch command taken apart: ``launcher`` is python or torchrun, ``nproc`` the torchrun processes per node
    (1 for python), ``script`` the training script as written, ``args`` its arguments."""

    launcher: Literal["python", "torchrun"]
    nproc: int
    interpreter: str
    script: str
    args: tuple[str, ...]


@dataclass
class Setting:
    """One script setting: ``name`` its key (argparse ``dest`` or the global's name), ``flag`` the option string
    the command line uses, ``default`` and ``value`` (:data:`UNKNOWN` when not a literal), ``type`` one of
    bool/int/float/str/None, ``choices`` a literal list or None, ``action`` argparse's action name or None,
    ``bool_parser`` the name of a custom converter (e.g. ``str2bool``) or None, ``given`` True when the command
    sets it."""

    name: str
    flag: str
    style: Style
    default: Any = None
    value: Any = None
    type: str | None = None
    choices: list[Any] | None = None
    action: str | None = None
    bool_parser: str | None = None
    help: str = ""
    given: bool = False
    command_args: list[str] = field(default_factory=list)


@dataclass
class ScriptSettings:
    """Everything read from the script: its style, its settings by name, local modules it imports, positional
    config files given on the command line, and the command's arguments in order, each with the name of the
    setting it sets (None for arguments no setting claims)."""

    style: Style
    settings: dict[str, Setting]
    imports: list[str]
    config_files: list[str]
    args: list[tuple[str, str | None]]


def read_launch(argv: list[str]) -> LaunchCommand:
    """Split a launch command; ContractError (one line) when no ``.py`` script can be found in it."""
    if not argv:
        raise ContractError(["scaffold: no launch command given (use: infrarsi contract scaffold -- python train.py)"])
    args = list(argv)
    launcher: Literal["python", "torchrun"] = "python"
    interpreter = "python"
    nproc = 1
    head = Path(args[0]).name
    if head.startswith(_PYTHONS):
        interpreter = args.pop(0)
        if args[:2] == ["-m", "torch.distributed.run"] or args[:2] == ["-m", "torch.distributed.launch"]:
            args = args[2:]
            launcher = "torchrun"
    elif head == "torchrun":
        args.pop(0)
        launcher = "torchrun"
    if launcher == "torchrun":
        while args and args[0].startswith("-"):
            opt = args.pop(0)
            key, _, val = opt.partition("=")
            if key in _TORCHRUN_VALUE_OPTS and not val and args:
                val = args.pop(0)
            if key in ("--nproc_per_node", "--nproc-per-node") and val.isdigit():
                nproc = int(val)
    else:
        while args and args[0].startswith("-") and not args[0].endswith(".py"):
            args.pop(0)  # interpreter options such as -u
    if not args or not args[0].endswith(".py"):
        raise ContractError([f"scaffold: no training script (*.py) in the command {shlex.join(argv)[:200]!r}"])
    return LaunchCommand(launcher=launcher, nproc=nproc, interpreter=interpreter, script=args[0],
                         args=tuple(args[1:]))


def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


def _str_const(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _type_of(value: Any) -> str | None:
    if value is UNKNOWN or value is None:
        return None
    return type(value).__name__ if isinstance(value, (bool, int, float, str)) else None


def _argparse_settings(tree: ast.AST) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        opts = [s for s in (_str_const(a) for a in node.args) if s is not None]
        if not opts or not all(o.startswith("-") for o in opts):
            continue  # positional arguments are not knobs
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        longs = [o for o in opts if o.startswith("--")] or opts
        dest = _str_const(kw["dest"]) if "dest" in kw else None
        name = dest or longs[0].lstrip("-").replace("-", "_")
        action_node = kw.get("action")
        action = _str_const(action_node) if action_node is not None else None
        if action is None and isinstance(action_node, ast.Attribute):
            action = action_node.attr  # argparse.BooleanOptionalAction
        type_node = kw.get("type")
        type_name = type_node.id if isinstance(type_node, ast.Name) else (
            type_node.attr if isinstance(type_node, ast.Attribute) else None)
        default = _literal(kw.get("default")) if "default" in kw else (
            False if action == "store_true" else True if action == "store_false" else None)
        choices = _literal(kw["choices"]) if "choices" in kw else None
        s = Setting(name=name, flag=longs[0], style="argparse", default=default, action=action,
                    choices=list(choices) if isinstance(choices, (list, tuple)) else None,
                    help=_str_const(kw["help"]) or "" if "help" in kw else "")
        if action in ("store_true", "store_false", "BooleanOptionalAction"):
            s.type = "bool"
        elif type_name in ("int", "float", "str", "bool"):
            s.type = type_name
        elif type_name is not None:
            s.bool_parser = type_name if isinstance(default, bool) else None
            s.type = _type_of(default)
        else:
            s.type = _type_of(default) or "str"
        s.value = default
        out[name] = s
    return out


_ARITH = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
          ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a / b, ast.Mod: lambda a, b: a % b}


def _const_eval(node: ast.AST, env: dict[str, Any], depth: int = 0) -> Any:
    """A literal, or integer/float arithmetic (+ - * / // %) over literals and earlier globals
    (``gradient_accumulation_steps = 5 * 8``); UNKNOWN for anything else."""
    if depth > 20:
        return UNKNOWN
    if isinstance(node, ast.Name):
        return env.get(node.id, UNKNOWN)
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        a, b = _const_eval(node.left, env, depth + 1), _const_eval(node.right, env, depth + 1)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
            try:
                value = _ARITH[type(node.op)](a, b)
            except (ArithmeticError, ValueError):
                return UNKNOWN
            return value if abs(value) < 2**53 else UNKNOWN
        return UNKNOWN
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _const_eval(node.operand, env, depth + 1)
        return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else UNKNOWN
    return _literal(node)


def _module_globals(tree: ast.Module, keep_unknown: bool = False) -> dict[str, Any]:
    """Module-level ``name = value`` assignments whose value is a scalar literal or constant arithmetic, in order
    (later ones win); with ``keep_unknown`` other assignments are kept as :data:`UNKNOWN` (computed settings such
    as ``dtype = 'bfloat16' if ... else 'float16'``)."""
    out: dict[str, Any] = {}
    for node in tree.body:
        target: ast.AST | None = None
        value_node: ast.AST | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value_node = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value_node = node.target, node.value
        if isinstance(target, ast.Name) and value_node is not None:
            value = _const_eval(value_node, out)
            if value is not UNKNOWN and isinstance(value, (bool, int, float, str)):
                out[target.id] = value
            elif keep_unknown:
                out[target.id] = UNKNOWN
    return out


def _uses_configurator(source: str, tree: ast.AST) -> bool:
    if "configurator" in source:
        return True
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "exec" for n in ast.walk(tree))


def _local_imports(tree: ast.AST, script_dir: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods = [node.module]
        for m in mods:
            top = m.split(".")[0]
            if (script_dir / f"{top}.py").is_file() and f"{top}.py" not in names:
                names.append(f"{top}.py")
    return names


def _parse(path: Path) -> tuple[str, ast.Module]:
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ContractError([f"scaffold: cannot read the script {path}: {exc}"]) from None
    try:
        return source, ast.parse(source, filename=str(path))
    except (SyntaxError, ValueError) as exc:
        raise ContractError([f"scaffold: {path} is not valid Python: {exc}"]) from None


def _globals_value(text: str) -> Any:
    """What nanoGPT's configurator does with ``--key=value``: a Python literal when it parses, else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _argparse_value(s: Setting, text: str) -> Any:
    if s.type == "int":
        try:
            return int(text)
        except ValueError:
            return text
    if s.type == "float":
        try:
            return float(text)
        except ValueError:
            return text
    if s.type == "bool" and s.bool_parser:
        return text.strip().lower() in ("1", "true", "yes", "y", "on", "t")
    if s.type == "bool":
        return bool(text)  # argparse's type=bool
    return text


def read_settings(script: Path, args: tuple[str, ...], cwd: Path) -> ScriptSettings:
    """The script's settings with the command's ``args`` applied (see the module docstring)."""
    source, tree = _parse(script)
    parsed = _argparse_settings(tree)
    style: Style = "argparse" if parsed else "globals"
    imports = _local_imports(tree, script.parent)
    config_files: list[str] = []
    ordered: list[tuple[str, str | None]] = []
    if style == "globals":
        values = _module_globals(tree, keep_unknown=True) if _uses_configurator(source, tree) or not parsed else {}
        parsed = {k: Setting(name=k, flag=f"--{k}", style="globals", default=v, value=v, type=_type_of(v))
                  for k, v in values.items() if not k.startswith("_") and not k.isupper()}
        for arg in args:
            if arg.startswith("--") and "=" in arg:
                key, _, text = arg[2:].partition("=")
                if key in parsed:
                    parsed[key].value = _globals_value(text)
                    parsed[key].given = True
                    parsed[key].command_args.append(arg)
                    ordered.append((arg, key))
                    continue
            elif not arg.startswith("-") and arg.endswith(".py"):
                config_files.append(arg)
                path = cwd / arg
                if path.is_file():
                    try:
                        overrides = _module_globals(_parse(path)[1])
                    except ContractError:
                        overrides = {}
                    for key, v in overrides.items():
                        if key in parsed:
                            parsed[key].value = v
                            parsed[key].default = v
            ordered.append((arg, None))
        return ScriptSettings(style, parsed, imports, config_files, ordered)
    by_flag: dict[str, Setting] = {}
    for s in parsed.values():
        by_flag[s.flag] = s
    # every option string of each setting maps to it (short and long forms)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            opts = [o for o in (_str_const(a) for a in node.args) if o and o.startswith("-")]
            owner = next((by_flag[o] for o in opts if o in by_flag), None)
            for o in opts:
                if owner is not None:
                    by_flag.setdefault(o, owner)
                    if owner.action == "BooleanOptionalAction" and o.startswith("--"):
                        by_flag.setdefault("--no-" + o[2:], owner)
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        key, eq, text = arg.partition("=")
        s = by_flag.get(key)
        if s is None:
            ordered.append((arg, None))
            continue
        s.given = True
        s.command_args.append(arg)
        ordered.append((arg, s.name))
        if s.action in ("store_true", "store_false", "BooleanOptionalAction"):
            s.value = (s.action != "store_false") if not key.startswith("--no-") else False
            continue
        if not eq and rest:
            text = rest.pop(0)
            s.command_args.append(text)
            ordered.append((text, s.name))
        s.value = _argparse_value(s, text)
    return ScriptSettings(style, parsed, imports, config_files, ordered)
