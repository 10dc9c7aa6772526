"""Load ``infrarsi.yaml`` with line numbers and report every problem at once.

:func:`load_contract` returns a validated :class:`~infrarsi.controller.contract.model.Contract` or raises
:class:`~infrarsi.controller.errors.ContractError` whose ``problems`` are lines of the form
``infrarsi.yaml:14 knobs[2].reference: 'fp8' is not one of values [fp32, bf16]``.
:func:`check_contract` returns that list instead of raising (empty when the contract is sound).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from infrarsi.controller.contract.model import Contract
from infrarsi.controller.errors import ContractError

Loc = tuple[str | int, ...]


def format_loc(loc: Sequence[str | int]) -> str:
    """``('knobs', 2, 'reference')`` -> ``knobs[2].reference``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
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
        """One formatted problem line for ``loc``."""
        return f"{self.path.name}:{self.line_of(loc)} {format_loc(loc)}: {message}"


def _plain(node: Any) -> Any:
    """ruamel round-trip objects -> plain dict/list/scalars."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
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


def parse_yaml(path: Path) -> LocatedDoc:
    """Parse ``path`` keeping line numbers; ContractError with the YAML error's line on a syntax error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ContractError([f"{path}: contract file not found"]) from None
    except OSError as exc:
        raise ContractError([f"{path}: cannot read contract: {exc.strerror}"]) from None
    yaml = YAML(typ="rt")
    try:
        root = yaml.load(io.StringIO(text))
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise ContractError([f"{path.name}:{line} (yaml): {exc.problem or exc.context}"]) from None
    if not isinstance(root, CommentedMap):
        raise ContractError([f"{path.name}:1 (top level): the contract must be a YAML mapping"])
    return LocatedDoc(path=path, root=root)


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
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p and "]" in p))
            problems.append(doc.problem(loc, _pydantic_message(err)))
    if contract is not None:
        problems.extend(doc.problem(loc, msg) for loc, msg in semantic_problems(contract, path.parent))
    return contract, problems


def load_contract(path: str | Path) -> Contract:
    """The validated contract at ``path``; :class:`ContractError` listing every problem otherwise."""
    contract, problems = check_contract(path)
    if problems or contract is None:
        raise ContractError(problems or [f"{path}: invalid contract"])
    return contract


def contract_digest(contract: Contract) -> str:
    """SHA-256 over the canonical JSON of the validated contract (what ``init`` locks)."""
    canonical = json.dumps(contract.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def repo_dir(contract: Contract, contract_path: str | Path) -> Path:
    """The target repository directory: ``contract.repo`` resolved against the contract file's folder."""
    return (Path(contract_path).resolve().parent / contract.repo).resolve()
