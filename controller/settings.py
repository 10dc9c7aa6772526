"""Where infrarsi keeps its state, read once from the environment.

- ``INFRARSI_HOME``: state directory (default ``$XDG_STATE_HOME/infrarsi`` or ``~/.local/state/infrarsi``).
- ``INFRARSI_DATABASE_URL``: SQLAlchemy URL; unset means SQLite at ``$INFRARSI_HOME/infrarsi.sqlite``.
  ``postgresql://`` URLs are mapped to the psycopg 3 driver.
- ``INFRARSI_SCRATCH``: where trial checkouts live (must be readable by compute nodes on a cluster);
  default ``$INFRARSI_HOME/scratch``.
- ``INFRARSI_KEY_FILE``: the controller's HMAC master key (created 0600 on first use); default
  ``$INFRARSI_HOME/signing.key``.  Training jobs never see it: each launch gets a derived per-trial key.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path


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
