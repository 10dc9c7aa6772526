"""Persistence behind one abstract interface (:class:`Store`); search and surrogate code never import this."""

from infrarsi.controller.store.base import Store
from infrarsi.controller.store.sql import SqlStore, open_store

__all__ = ["SqlStore", "Store", "open_store"]
