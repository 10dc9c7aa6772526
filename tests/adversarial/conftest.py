"""Fixtures for the adversarial matrix tests: the real single-node Slurm (marker ``slurm``) and PostgreSQL.

The Slurm fixture is the executor tests' (``tests/executors/conftest.py``): tests skip with a reason when ``sinfo``
is absent; when it is present but the node is down and we are root, ``deploy/slurm-up.sh`` (idempotent) runs once.
"""

from __future__ import annotations

import pytest

from tests.executors.conftest import slurm_cluster  # noqa: F401  (a fixture, used through slurm_up)


@pytest.fixture(scope="session")
def slurm_up(slurm_cluster: str) -> None:  # noqa: F811
    """The real single-node Slurm is usable (skips otherwise)."""


@pytest.fixture(scope="session")
def pg_admin(pg_server: str) -> str:
    """The PostgreSQL admin URL (the root conftest starts the server or skips)."""
    return pg_server
