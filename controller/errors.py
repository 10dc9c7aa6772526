"""Error types shared by the controller.  Each carries a one-line, user-facing message."""

from __future__ import annotations


class InfrarsiError(Exception):
    """Base class: the message is one line naming what is wrong; exit code 2."""

    exit_code = 2


class ContractError(InfrarsiError):
    """A task contract is malformed; ``problems`` holds every ``file:line field: message``."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(problems[0] if len(problems) == 1 else f"{len(problems)} problems in contract; first: {problems[0]}")


class StoreError(InfrarsiError):
    """The database is unreachable or not at the expected schema revision."""


class ExecutorError(InfrarsiError):
    """The executor (local process launcher or Slurm) failed or is unreachable."""


class PatchError(InfrarsiError):
    """A candidate patch is refused at intake (escapes the repo, touches a frozen file, ...)."""


class ScopeError(InfrarsiError):
    """The scope lock was violated: frozen files changed since ``init``."""


#: longest message printed for one error; longer ones are cut with an ellipsis
MAX_MESSAGE_CHARS = 500


def one_line(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` as one printable line of at most ``limit`` characters: the first non-empty line of ``str(text)``,
    control characters replaced, cut with ``...``.  Never raises (an unprintable object gives its type name)."""
    try:
        s = str(text)
    except Exception:
        return f"<unprintable {type(text).__name__}>"
    lines = [ln.strip() for ln in s.splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    first = "".join(ch if ch.isprintable() else "?" for ch in first)
    return first if len(first) <= limit else first[: limit - 3] + "..."
