"""Load ``infrarsi.yaml`` with line numbers and report every problem at once.

Untrusted input: the file is refused before parsing when it is not a regular file, larger than
:data:`MAX_CONTRACT_BYTES` or not UTF-8; the YAML composer refuses aliases (no alias bombs), nesting deeper than
:data:`MAX_DEPTH`, more than :data:`MAX_NODES` nodes, overlong values and number literals longer than
:data:`MAX_NUMBER_CHARS` (never converted).  Each refusal is one ``file:line (what): message`` line; no input
makes these functions raise anything but :class:`~infrarsi.controller.errors.ContractError`, and all checks are
linear in the file size.

:func:`load_contract` returns a validated :class:`~infrarsi.controller.contract.model.Contract` or raises
:class:`~infrarsi.controller.errors.ContractError` whose ``problems`` are lines of the form
``infrarsi.yaml:14 knobs[2].reference: 'fp8' is not one of values [fp32, bf16]``.
:func:`check_contract` returns that list instead of raising (empty when the contract is sound).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import Composer, ComposerError
from ruamel.yaml.constructor import ConstructorError, RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.scalarbool import ScalarBoolean

from infrarsi.controller.contract.model import MAX_TEXT_CHARS, Contract
from infrarsi.controller.errors import ContractError, one_line

try:  # ruamel >= 0.18 resolves tags to Tag objects
    from ruamel.yaml.tag import Tag
except ImportError:  # pragma: no cover
    Tag = None  # type: ignore[assignment,misc]

Loc = tuple[str | int, ...]


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.\-]+$")


def format_loc(loc: Sequence[str | int]) -> str:
    """``('knobs', 2, 'reference')`` -> ``knobs[2].reference``; an unusual key (spaces, symbols, non-ASCII) is
    written as a JSON string in brackets with spaces escaped (``["&a\\u0020"]``), so a field never holds a
    space and the line stays parseable."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(str(part)):
            out += ("." if out else "") + str(part)
        else:
            quoted = json.dumps(str(part)[:60], ensure_ascii=True).replace(" ", "\\u0020")
            out += f"[{quoted}]"
    return out or "(top level)"


@dataclass
class LocatedDoc:
    """A parsed YAML document that can answer "which line is this field on?"."""

    path: Path
    root: Any

    def line_of(self, loc: Sequence[str | int]) -> int:
        """1-based line of the deepest node on ``loc`` that exists (the key's line for mapping entries)."""
        node = self.root
        line = 1
        for part in loc:
            if isinstance(node, CommentedMap) and part in node:
                try:
                    line = node.lc.key(part)[0] + 1
                except (KeyError, TypeError):
                    pass
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
                try:
                    line = node.lc.item(part)[0] + 1
                except (KeyError, TypeError):
                    pass
                node = node[part]
            else:
                if isinstance(node, (CommentedMap, CommentedSeq)) and node.lc.line is not None and line == 1:
                    line = node.lc.line + 1
                break
        return line

    def problem(self, loc: Sequence[str | int], message: str) -> str:
        """One formatted problem line for ``loc`` (one line, bounded length)."""
        return clean_problem(f"{self.path.name}:{self.line_of(loc)} {format_loc(loc)}: {message}")


#: contract files larger than this are refused before parsing (ruamel's round-trip parser needs ~10 s per MiB
#: on a loaded 2-core machine; real contracts are a few KiB)
MAX_CONTRACT_BYTES = 256 * 1024
MAX_DEPTH = 16          # nesting of mappings/sequences
MAX_NODES = 50_000      # YAML nodes in one contract
MAX_SCALAR_CHARS = MAX_TEXT_CHARS
MAX_NUMBER_CHARS = 24   # an integer or float literal (a 5000-digit integer is refused, not converted)
MAX_PROBLEM_CHARS = 400
_MAX_PROBLEMS = 100

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_STR_TAG = "tag:yaml.org,2002:str"


def _tag(node: Any) -> str:
    tag = getattr(node, "tag", None)
    return str(getattr(tag, "value", tag) or "")


class _LimitedComposer(Composer):
    """ruamel's composer with the contract's limits: no aliases, bounded depth, node count and scalar sizes.

    Implicit timestamps stay strings (a contract has no dates; ``2001-13-45`` must not crash the constructor).
    Every refusal is a ComposerError carrying the offending node's mark, so it is reported with its line.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.parser.check_event(AliasEvent):
            event = self.parser.peek_event()
            raise ComposerError(None, None, f"YAML aliases (*{one_line(event.anchor, 40)}) are not allowed in a "
                                "contract: write the value out", event.start_mark)
        counted = getattr(self, "_infrarsi_nodes", 0) + 1
        self._infrarsi_nodes = counted
        event = self.parser.peek_event()
        if counted > MAX_NODES:
            raise ComposerError(None, None, f"more than {MAX_NODES} YAML nodes", event.start_mark)
        if self.depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        return super().compose_node(parent, index)

    def compose_scalar_node(self, anchor: Any) -> Any:
        node = super().compose_scalar_node(anchor)
        value = node.value
        tag = _tag(node)
        if len(value) > MAX_SCALAR_CHARS:
            raise ComposerError(None, None, f"a value of {len(value)} characters is too long "
                                f"(at most {MAX_SCALAR_CHARS})", node.start_mark)
        if "\x00" in value:
            raise ComposerError(None, None, "a value contains a NUL character", node.start_mark)
        if tag in (_INT_TAG, _FLOAT_TAG) and len(value) > MAX_NUMBER_CHARS:
            raise ComposerError(None, None, f"the number {value[:12]}... has {len(value)} characters, too large "
                                f"(at most {MAX_NUMBER_CHARS})", node.start_mark)
        if tag == _TIMESTAMP_TAG and node.style is None:
            node.tag = Tag(suffix=_STR_TAG) if Tag is not None else _STR_TAG
        return node


_CONSTRUCT_ERRORS = (ValueError, TypeError, OverflowError, ArithmeticError, LookupError, AttributeError,
                     AssertionError)


class _GuardedConstructor(RoundTripConstructor):
    """Round-trip constructor whose failures (ValueError on an explicit ``!!int abc``, an unhashable mapping used
    as a key, ...) become ConstructorErrors carrying the node's mark."""

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except YAMLError:
            raise
        except _CONSTRUCT_ERRORS as exc:
            raise ConstructorError(None, None, f"cannot read this value: {one_line(exc, 120)}",
                                   node.start_mark) from None

    def construct_mapping(self, node: Any, maptyp: Any, deep: bool = False) -> Any:
        try:
            return super().construct_mapping(node, maptyp, deep=deep)
        except YAMLError:
            raise
        except _CONSTRUCT_ERRORS as exc:
            raise ConstructorError(None, None, f"cannot read this mapping: {one_line(exc, 120)}",
                                   node.start_mark) from None


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.Composer = _LimitedComposer
    yaml.Constructor = _GuardedConstructor
    yaml.allow_duplicate_keys = False
    return yaml


def _plain(node: Any) -> Any:
    """ruamel round-trip objects -> plain dict/list/scalars (bounded depth: the composer limits nesting)."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, ScalarBoolean):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def _pydantic_message(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field"
    return str(err.get("msg", "invalid value")).replace("Value error, ", "")


def clean_problem(line: str) -> str:
    """One printable line of at most MAX_PROBLEM_CHARS characters (a problem never spans lines)."""
    return one_line(line.replace("\n", " ").replace("\r", " "), MAX_PROBLEM_CHARS)


def _line_at(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, max(0, offset)) + 1


def _read(path: Path) -> str:
    """The contract's text: a regular file of at most MAX_CONTRACT_BYTES, valid UTF-8; ContractError otherwise."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ContractError([clean_problem(f"{path}: contract file not found")]) from None
    except OSError as exc:
        raise ContractError([clean_problem(f"{path}: cannot read contract: {exc.strerror}")]) from None
    if not stat.S_ISREG(st.st_mode):
        raise ContractError([clean_problem(f"{path}: not a regular file")])
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_CONTRACT_BYTES + 1)
    except OSError as exc:
        raise ContractError([clean_problem(f"{path}: cannot read contract: {exc.strerror}")]) from None
    if len(data) > MAX_CONTRACT_BYTES:
        raise ContractError([clean_problem(f"{path.name}:1 (file): larger than {MAX_CONTRACT_BYTES} bytes, "
                                           f"the limit for a contract")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError([clean_problem(
            f"{path.name}:{_line_at(data, exc.start)} (file): not UTF-8 text "
            f"(byte 0x{data[exc.start]:02x} at offset {exc.start})")]) from None
    return text


def _yaml_problem(path: Path, text: str, exc: YAMLError) -> str:
    if isinstance(exc, MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        what = exc.problem or exc.context or type(exc).__name__
    else:
        position = getattr(exc, "position", None)
        line = text.count("\n", 0, position) + 1 if isinstance(position, int) else 1
        reason = getattr(exc, "reason", None)
        what = f"{reason} (character {getattr(exc, 'character', '?')!r})" if reason else str(exc)
    return clean_problem(f"{path.name}:{line} (yaml): {what}")


def parse_yaml(path: Path) -> LocatedDoc:
    """Parse ``path`` keeping line numbers; ContractError with the offending line on a syntax error or a limit
    (size, UTF-8, aliases, depth, node count, value length, number length)."""
    text = _read(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            root = _yaml().load(io.StringIO(text))
    except YAMLError as exc:
        raise ContractError([_yaml_problem(path, text, exc)]) from None
    except RecursionError:
        raise ContractError([clean_problem(f"{path.name}:1 (yaml): nested too deeply")]) from None
    except _CONSTRUCT_ERRORS as exc:  # a construction failure outside a node we could locate
        raise ContractError([clean_problem(f"{path.name}:1 (yaml): cannot read the document: "
                                           f"{type(exc).__name__}: {one_line(exc, 120)}")]) from None
    if not isinstance(root, CommentedMap):
        raise ContractError([f"{path.name}:1 (top level): the contract must be a YAML mapping"])
    return LocatedDoc(path=path, root=root)


_UNION_TAGS = frozenset({"bool", "int", "float", "str"})


def _structural_problems(doc: LocatedDoc, exc: ValidationError) -> list[str]:
    """pydantic errors as problem lines; the four failed members of a scalar union become one line."""
    out: list[str] = []
    seen_union: set[tuple[Any, ...]] = set()
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p and "]" in p))
        if loc and loc[-1] in _UNION_TAGS and err.get("type", "").endswith(("_type", "_parsing", "finite_number")):
            base = loc[:-1]
            if base in seen_union:
                continue
            seen_union.add(base)
            out.append(doc.problem(base, "must be a boolean, a finite number or a string"))
            continue
        out.append(doc.problem(loc, _pydantic_message(err)))
    return out


def check_contract(path: str | Path) -> tuple[Contract | None, list[str]]:
    """Validate the contract at ``path``: ``(contract, [])`` when sound, ``(None | contract, problems)`` otherwise.

    Structural errors (pydantic) and semantic ones (:mod:`infrarsi.controller.contract.checks`) are all collected.
    """
    from infrarsi.controller.contract.checks import semantic_problems

    path = Path(path)
    try:
        doc = parse_yaml(path)
    except ContractError as exc:
        return None, exc.problems
    data = _plain(doc.root)
    problems: list[str] = []
    contract: Contract | None = None
    try:
        contract = Contract.model_validate(data)
    except ValidationError as exc:
        problems.extend(_structural_problems(doc, exc))
    if contract is not None:
        problems.extend(doc.problem(loc, msg) for loc, msg in semantic_problems(contract, path.parent))
    if len(problems) > _MAX_PROBLEMS:
        problems = problems[:_MAX_PROBLEMS] + [f"{path.name}:1 (top level): ... and {len(problems) - _MAX_PROBLEMS} "
                                               f"more problems"]
    return contract, problems


def check_warnings(path: str | Path) -> list[str]:
    """Warnings for a contract that passes :func:`check_contract` (``file:line field: warning: ...`` lines; empty
    when the file has problems or nothing to warn about).  Warnings never fail ``contract check``."""
    from infrarsi.controller.contract.checks import contract_warnings

    path = Path(path)
    try:
        doc = parse_yaml(path)
        contract = Contract.model_validate(_plain(doc.root))
    except (ContractError, ValidationError):
        return []
    return [doc.problem(loc, f"warning: {msg}") for loc, msg in contract_warnings(contract)]


def load_contract(path: str | Path) -> Contract:
    """The validated contract at ``path``; :class:`ContractError` listing every problem otherwise."""
    contract, problems = check_contract(path)
    if problems or contract is None:
        raise ContractError(problems or [f"{path}: invalid contract"])
    return contract


#: fields added after contracts were first locked: left out of the digest when the contract does not set them
LATER_FIELDS: dict[str, tuple[str, ...]] = {
    "Contract": ("proposers", "forbid", "inputs"),
    "Launch": ("trial_args", "trial_env"),
    "Workload": ("flops_per_token",),
    "Knob": ("render", "priors", "canonical"),
}


def _drop_unset(model: Any, data: dict[str, Any]) -> None:
    for name in LATER_FIELDS.get(type(model).__name__, ()):
        if name not in model.model_fields_set:
            data.pop(name, None)


def contract_digest(contract: Contract) -> str:
    """SHA-256 over the canonical JSON of the validated contract (what ``init`` locks).  Sections and fields added
    later (:data:`LATER_FIELDS`: ``proposers``, ``forbid``, ``inputs``, ``launch.trial_args``/``trial_env``,
    ``workload.flops_per_token``, ``knobs[].render``/``priors``/``canonical``) are left out when the contract does not set them,
    so contracts written before they existed keep their digest."""
    data = contract.model_dump(mode="json")
    _drop_unset(contract, data)
    _drop_unset(contract.launch, data["launch"])
    _drop_unset(contract.workload, data["workload"])
    for knob, knob_data in zip(contract.knobs, data["knobs"]):
        _drop_unset(knob, knob_data)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def repo_dir(contract: Contract, contract_path: str | Path) -> Path:
    """The target repository directory: ``contract.repo`` resolved against the contract file's folder."""
    return (Path(contract_path).resolve().parent / contract.repo).resolve()
