"""Store backends for the store suite, like Optuna's ``STORAGE_MODES``: every test taking ``store`` or
``store_factory`` runs on the in-memory store, on SQLite and on a fresh PostgreSQL database (marked ``postgres``).

``store_factory()`` opens another store on the *same* database each time it is called (two processes talking to
one server), which the lease tests need.  Tests about SQL itself (migrations, triggers, roles, row-level
security) do not use these fixtures and stay SQL-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from infrarsi.controller.store.base import Store

STORAGE_MODES = ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]

StoreFactory = Callable[[], Store]


@pytest.fixture(params=STORAGE_MODES)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A function opening a new :class:`Store` on this test's one database of the parametrised backend."""
    if request.param == "memory":
        from infrarsi.controller.store.memory import MemoryDatabase, MemoryStore

        db = MemoryDatabase()
        return lambda: MemoryStore(db)
    from infrarsi.controller.store import open_store

    url = f"sqlite:///{tmp_path / 'infrarsi.sqlite'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    return lambda: open_store(url, auto_upgrade=True)


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    """One store on the parametrised backend."""
    return store_factory()
