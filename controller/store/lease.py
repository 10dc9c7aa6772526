"""A leader lease with a fencing token, on the ``leader_lease`` table (migration 0003).

Contract:

- One row per lease name.  :meth:`SqlLease.acquire` takes the row when it is free (``holder`` NULL) or expired by
  the *database* clock, and bumps ``token`` by one; tokens only ever increase, so a newer leader always holds a
  larger token.  :meth:`SqlLease.renew` extends the expiry only while the row still carries this holder and token;
  it returns False once someone else took the lease (superseded: this process must stop acting).
- :meth:`SqlLease.valid` is the local view: the lease is valid until ``lease_s`` after the *start* of the last
  successful acquire/renew (measured on the monotonic clock, which keeps running while a process is stopped, so a
  process resumed after SIGSTOP sees its lease expired before it does anything).
- :meth:`SqlLease.fence` is run inside every write transaction of the leader's store, after its writes are flushed
  and before commit: it raises :class:`FencedError` when the local lease expired or the row's token is newer.  On
  PostgreSQL it reads the row ``FOR SHARE``, so a competing :meth:`acquire` (an UPDATE of that row) waits for the
  write to commit, and every later write of the old leader is refused: writes are totally ordered by token.
- Nothing here uses advisory locks.  A role that cannot UPDATE ``leader_lease`` cannot lock its row (``FOR
  UPDATE``/``FOR SHARE`` need UPDATE rights), so the read-only finance role cannot stall the daemon; the daemon
  role needs :func:`grant_sql`.  The acquire statement runs under a short ``lock_timeout`` so a row lock held by
  a stopped process delays a standby by seconds, not forever (the daemon's sessions also carry
  ``idle_in_transaction_session_timeout``, see :func:`infrarsi.controller.store.sql.make_engine`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from infrarsi.controller.errors import StoreError
from infrarsi.controller.store.base import FencedError, LeaderLease
from infrarsi.controller.store.records import LeaseRecord

DEFAULT_NAME = "daemon"
DEFAULT_LEASE_S = 15.0
DEFAULT_RENEW_S = 5.0


@dataclass(frozen=True)
class LeaseConfig:
    """Lease timing.  ``INFRARSI_LEASE_S`` (default 15) and ``INFRARSI_LEASE_RENEW_S`` (default 5) override it;
    ``renew_s`` must be well below ``lease_s`` (a renewal may be delayed by a slow database)."""

    lease_s: float = DEFAULT_LEASE_S
    renew_s: float = DEFAULT_RENEW_S

    @classmethod
    def from_env(cls) -> "LeaseConfig":
        def num(var: str, default: float) -> float:
            raw = os.environ.get(var, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise StoreError(f"{var}={raw!r} is not a number of seconds") from None
            if value <= 0:
                raise StoreError(f"{var}={raw!r} must be positive")
            return value

        cfg = cls(num("INFRARSI_LEASE_S", DEFAULT_LEASE_S), num("INFRARSI_LEASE_RENEW_S", DEFAULT_RENEW_S))
        if cfg.renew_s >= cfg.lease_s:
            raise StoreError(f"INFRARSI_LEASE_RENEW_S ({cfg.renew_s:g}) must be below INFRARSI_LEASE_S "
                             f"({cfg.lease_s:g})")
        return cfg


def grant_sql(role: str, schema: str = "public") -> str:
    """The GRANT giving ``role`` (the daemon's role) what the lease needs; give it to no other role."""
    if not role.replace("_", "").isalnum():
        raise StoreError(f"role name {role!r} must be letters, digits and underscores")
    return f'GRANT SELECT, INSERT, UPDATE ON TABLE {schema}.leader_lease TO "{role}"'


def new_holder_id() -> str:
    """A holder id unique to this process instance: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _now_sql(dialect: str) -> str:
    if dialect == "postgresql":
        return "EXTRACT(EPOCH FROM clock_timestamp())"
    return "((julianday('now') - 2440587.5) * 86400.0)"


def _one_line(exc: BaseException) -> str:
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class SqlLease(LeaderLease):
    """The lease row ``name`` held (or wanted) by ``holder``; see the module docstring for the contract."""

    def __init__(self, engine: Engine, name: str = DEFAULT_NAME, holder: str | None = None,
                 lease_s: float = DEFAULT_LEASE_S, lock_timeout_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        self.engine = engine
        self.name = name
        self.holder = holder or new_holder_id()
        self.lease_s = lease_s
        self.lock_timeout_s = lock_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._token: int | None = None
        self._valid_until = 0.0

    # ------------------------------------------------------------------ state
    def remaining_s(self) -> float:
        with self._lock:
            return max(0.0, self._valid_until - self._clock()) if self._token is not None else 0.0

    def _run(self, fn: Callable[[Connection], Any]) -> Any:
        try:
            with self.engine.begin() as conn:
                return fn(conn)
        except (OperationalError, DBAPIError) as exc:
            if isinstance(exc, OperationalError) or exc.connection_invalidated:
                raise StoreError(f"lease '{self.name}': database unavailable: {_one_line(exc)}") from None
            raise

    # ------------------------------------------------------------------ operations
    def acquire(self) -> bool:
        """Take the lease when free or expired (token + 1); True when this holder now holds it.  Holding it
        already counts as a renewal.  StoreError when the database is unreachable."""
        if self._token is not None and self.renew():
            return True
        started = self._clock()
        now = _now_sql(self.engine.dialect.name)

        def go(conn: Connection) -> int | None:
            self._ensure_row(conn)
            if conn.dialect.name == "postgresql":
                conn.execute(text(f"SET LOCAL lock_timeout = '{int(self.lock_timeout_s * 1000)}ms'"))
            res = conn.execute(text(
                f"UPDATE leader_lease SET holder = :h, token = token + 1, expires_at = {now} + :s, "
                f"renewed_at = {now} WHERE name = :n AND (holder IS NULL OR expires_at < {now})"
            ), {"h": self.holder, "s": self.lease_s, "n": self.name})
            if res.rowcount != 1:
                return None
            return int(conn.execute(text("SELECT token FROM leader_lease WHERE name = :n"),
                                    {"n": self.name}).scalar_one())

        try:
            token = self._run(go)
        except StoreError as exc:
            if "lock timeout" in str(exc) or "canceling statement" in str(exc):
                return False  # a (stopped) writer holds the row: someone else is or was leader
            raise
        with self._lock:
            if token is None:
                self._token, self._valid_until = None, 0.0
                return False
            self._token, self._valid_until = token, started + self.lease_s
            return True

    def _ensure_row(self, conn: Connection) -> None:
        if conn.execute(text("SELECT 1 FROM leader_lease WHERE name = :n"), {"n": self.name}).first():
            return
        try:
            with conn.begin_nested():
                conn.execute(text("INSERT INTO leader_lease (name, holder, token, expires_at) "
                                  "VALUES (:n, NULL, 0, 0)"), {"n": self.name})
        except IntegrityError:
            pass  # another process inserted it first

    def renew(self) -> bool:
        """Extend the expiry while the row still has this holder and token.  False (and the lease is dropped
        locally) once superseded; StoreError when the database is unreachable (the local expiry stands)."""
        token = self._token
        if token is None:
            return False
        started = self._clock()
        now = _now_sql(self.engine.dialect.name)
        rows = self._run(lambda conn: conn.execute(text(
            f"UPDATE leader_lease SET expires_at = {now} + :s, renewed_at = {now} "
            "WHERE name = :n AND holder = :h AND token = :t"
        ), {"s": self.lease_s, "n": self.name, "h": self.holder, "t": token}).rowcount)
        with self._lock:
            if self._token != token:
                return False
            if rows != 1:
                self._token, self._valid_until = None, 0.0
                return False
            self._valid_until = started + self.lease_s
            return True

    def release(self) -> None:
        """Give the lease up now (a clean shutdown) so a standby need not wait for the expiry; never raises."""
        token = self._token
        with self._lock:
            self._token, self._valid_until = None, 0.0
        if token is None:
            return
        try:
            self._run(lambda conn: conn.execute(text(
                "UPDATE leader_lease SET holder = NULL, expires_at = 0 WHERE name = :n AND holder = :h "
                "AND token = :t"), {"n": self.name, "h": self.holder, "t": token}))
        except Exception:  # noqa: BLE001 - best effort: the expiry frees it anyway
            pass

    def fence(self, conn: Connection) -> None:
        """Inside a write transaction on ``conn``: raise FencedError unless this holder's token is current."""
        token = self._token
        if token is None or not self.valid():
            raise FencedError(f"lease '{self.name}' expired or lost (token {token}): refusing to write")
        lock = " FOR SHARE" if conn.dialect.name == "postgresql" else ""
        current = conn.execute(text(f"SELECT token FROM leader_lease WHERE name = :n{lock}"),
                               {"n": self.name}).scalar()
        if current != token:
            with self._lock:
                if self._token == token:
                    self._token, self._valid_until = None, 0.0
            raise FencedError(f"lease '{self.name}' was taken over (token {current} > ours {token}): "
                              "refusing to write")

    def check(self) -> None:
        """Before a side effect outside the database (a job submission): FencedError unless still leader."""
        try:
            with self.engine.begin() as conn:
                self.fence(conn)
        except (OperationalError, DBAPIError) as exc:
            if isinstance(exc, OperationalError) or exc.connection_invalidated:
                raise StoreError(f"lease '{self.name}': database unavailable: {_one_line(exc)}") from None
            raise


def read_lease(engine: Engine, name: str = DEFAULT_NAME) -> LeaseRecord | None:
    """The lease row ``name`` with the database's current time (None when never taken)."""
    now = _now_sql(engine.dialect.name)
    with engine.connect() as conn:
        row = conn.execute(text(f"SELECT name, holder, token, expires_at, {now} AS db_now FROM leader_lease "
                                "WHERE name = :n"), {"n": name}).first()
    if row is None:
        return None
    return LeaseRecord(name=row.name, holder=row.holder, token=int(row.token), expires_at=float(row.expires_at),
                       db_now=float(row.db_now))


class Heartbeat:
    """A daemon thread renewing ``lease`` every ``renew_s`` seconds until stopped or superseded.

    ``lost`` is set when a renewal finds the lease taken over; database errors are retried at the next beat
    (the lease stays valid locally until its expiry)."""

    def __init__(self, lease: LeaderLease, renew_s: float, on_error: Callable[[str], None] | None = None):
        self.lease = lease
        self.renew_s = renew_s
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._on_error = on_error or (lambda msg: None)
        self._thread = threading.Thread(target=self._loop, name="lease-heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.renew_s):
            try:
                if not self.lease.renew():
                    self.lost.set()
                    return
            except StoreError as exc:
                self._on_error(str(exc))
