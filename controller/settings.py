"""Where infrarsi keeps its state, read once from the environment.

- ``INFRARSI_HOME``: state directory (default ``$XDG_STATE_HOME/infrarsi`` or ``~/.local/state/infrarsi``).
- ``INFRARSI_DATABASE_URL``: SQLAlchemy URL; unset means SQLite at ``$INFRARSI_HOME/infrarsi.sqlite``.
  ``postgresql://`` URLs are mapped to the psycopg 3 driver.
- ``INFRARSI_SCRATCH``: where trial checkouts live (must be readable by compute nodes on a cluster);
  default ``$INFRARSI_HOME/scratch``.
- ``INFRARSI_KEY_FILE``: the controller's HMAC master key (created 0600 on first use); default
  ``$INFRARSI_HOME/signing.key``.  Training jobs never see it: each launch gets a derived per-trial key.
- ``INFRARSI_CPU_RANKS``: run ``torchrun`` contracts with this many CPU (gloo) ranks and no GPU (a CPU smoke
  of a multi-rank contract; ``infrarsi run --cpu-ranks N``).
- ``INFRARSI_ISOLATION``: ``bwrap`` (default: every job runs inside a bubblewrap sandbox, and the wrapper refuses
  to start it when bubblewrap is unavailable) or ``none`` (explicit opt-out for a trusted single-user machine;
  also ``isolation: none`` in the daemon config file).  ``none`` is reported loudly: a warning line on stderr and
  ``wrapper.isolation.mode = "none"`` in every receipt.

Identity: on PostgreSQL a campaign's owner and an event's actor are the database role of the session
(``current_user``/``session_user``, ``docs/admin.md``); on the embedded SQLite store they are :func:`os_user`.
No environment variable decides who anyone is.
"""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from infrarsi.controller.errors import InfrarsiError

ISOLATION_MODES = ("bwrap", "none")
_warned_unisolated = False


def isolation_mode() -> str:
    """``INFRARSI_ISOLATION``, else the daemon config's ``isolation``, else ``bwrap``.  Raises InfrarsiError
    (one line) for any other value.  Prints a warning line on stderr (once per process) when it is ``none``."""
    global _warned_unisolated
    mode = os.environ.get("INFRARSI_ISOLATION")
    where = "INFRARSI_ISOLATION"
    if not mode and os.environ.get("INFRARSI_CONFIG"):
        from infrarsi.controller.config import daemon_config

        mode, where = daemon_config().isolation, "isolation (INFRARSI_CONFIG)"
    mode = (mode or "bwrap").strip().lower()
    if mode not in ISOLATION_MODES:
        raise InfrarsiError(f"{where}: {mode!r} is not one of {', '.join(ISOLATION_MODES)}")
    if mode == "none" and not _warned_unisolated:
        _warned_unisolated = True
        print("infrarsi: warning: isolation is off (INFRARSI_ISOLATION=none): training jobs run unsandboxed and can "
              "read this user's files; use only on a trusted single-user machine", file=sys.stderr, flush=True)
    return mode


CPU_RANKS_ENV = "INFRARSI_CPU_RANKS"


def cpu_ranks() -> int | None:
    """``INFRARSI_CPU_RANKS`` (``infrarsi run --cpu-ranks N`` sets it): run ``torchrun`` contracts with N CPU
    processes (gloo) and no GPU, a CPU smoke of a multi-rank contract; None when unset or empty.  Raises
    InfrarsiError (one line) for anything but a whole number from 1 to 64."""
    raw = (os.environ.get(CPU_RANKS_ENV) or "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 64:
        raise InfrarsiError(f"{CPU_RANKS_ENV}: {raw!r} is not a number of ranks from 1 to 64")
    return int(raw)


def os_user() -> str:
    """The OS user of this process from its real uid (``pwd``): the owner and audit actor on the embedded SQLite
    store.  Never ``LOGNAME``/``USER``, which anyone can set; an uid without a passwd entry is ``uid<N>``."""
    import pwd

    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def _default_home() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "infrarsi"


def normalize_url(url: str) -> str:
    """Map plain ``postgresql://``/``postgres://`` URLs to SQLAlchemy's psycopg 3 dialect."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


@dataclass(frozen=True)
class Settings:
    """Resolved settings; build with :meth:`from_env`."""

    home: Path
    database_url: str
    scratch: Path
    key_file: Path

    @classmethod
    def from_env(cls) -> "Settings":
        home = Path(os.environ.get("INFRARSI_HOME") or _default_home()).expanduser().resolve()
        url = os.environ.get("INFRARSI_DATABASE_URL") or f"sqlite:///{home / 'infrarsi.sqlite'}"
        scratch_env = os.environ.get("INFRARSI_SCRATCH")
        if not scratch_env and os.environ.get("INFRARSI_CONFIG"):
            from infrarsi.controller.config import daemon_config

            scratch_env = daemon_config().scratch_dir
        scratch = Path(scratch_env or home / "scratch").expanduser().resolve()
        key = Path(os.environ.get("INFRARSI_KEY_FILE") or home / "signing.key").expanduser().resolve()
        return cls(home=home, database_url=normalize_url(url), scratch=scratch, key_file=key)

    @property
    def embedded(self) -> bool:
        """True when running on the embedded SQLite default."""
        return self.database_url.startswith("sqlite")

    def master_key(self) -> bytes:
        """The HMAC master key, created with mode 0600 when absent."""
        if not self.key_file.exists():
            self.key_file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
        return bytes.fromhex(self.key_file.read_text().strip())
