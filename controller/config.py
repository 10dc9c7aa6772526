"""The daemon's optional configuration file (``INFRARSI_CONFIG``, YAML; see ``deploy/infrarsi.example.yaml``).

Everything in it can also come from the environment; the file wins over built-in defaults, the environment
(``INFRARSI_SCRATCH``, ``INFRARSI_POLL_S``, ``INFRARSI_PARTITION_LIMITS``, ``INFRARSI_LOCAL_SLOTS``) wins over
the file.  Unknown keys are errors naming the key.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.proposers.spec import ProposersSpec


class ExecutorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "slurm"
    options: dict[str, Any] = Field(default_factory=dict)


class DaemonConfig(BaseModel):
    """``executor`` (name + keyword options of SlurmExecutor/LocalExecutor), ``scratch_dir``, ``partition_limits``,
    ``isolation``, ``proposers`` (the site default)."""

    model_config = ConfigDict(extra="forbid")
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    scratch_dir: str | None = None
    partition_limits: dict[str, int] = Field(default_factory=dict)
    #: ``bwrap`` (default) or ``none``: see infrarsi.controller.settings.isolation_mode
    isolation: str | None = None
    #: site default ``proposers:`` for contracts without their own section (same form as the contract's;
    #: see infrarsi.controller.campaign.proposing.effective_proposers).  Unset: the patch folder only.
    proposers: ProposersSpec | None = None


@lru_cache(maxsize=4)
def _load(path: str) -> DaemonConfig:
    from ruamel.yaml import YAML

    p = Path(path)
    if not p.is_file():
        raise InfrarsiError(f"INFRARSI_CONFIG: {p} does not exist")
    try:
        data = YAML(typ="safe").load(p.read_text()) or {}
        return DaemonConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise InfrarsiError(f"{p.name}: {where}: {err['msg']}") from None
    except Exception as exc:  # YAML syntax
        raise InfrarsiError(f"{p.name}: {str(exc).splitlines()[0]}") from None


def daemon_config() -> DaemonConfig:
    """The configuration named by ``INFRARSI_CONFIG`` (defaults when unset)."""
    path = os.environ.get("INFRARSI_CONFIG")
    return _load(path) if path else DaemonConfig()
