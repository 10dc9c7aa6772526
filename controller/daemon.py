"""``infrarsi serve``: the long-lived controller that advances every open campaign.

Only one daemon acts on a database at a time: the leader holds a lease row with a fencing token
(:mod:`infrarsi.controller.store.lease`), renewed by a heartbeat thread; others stand by and take the lease once
it expires.  While leading, the store refuses every write (and the engine every job submission) once a newer
token exists, and the daemon that gets fenced logs one line and goes back to standby.  Each cycle ticks every
non-terminal campaign through the same :class:`CampaignEngine` the embedded mode uses; a fault while ticking
one campaign stays in that campaign (bounded retries with backoff, then the campaign is failed with a one-line
reason), while transient faults (database or executor briefly unreachable) are retried without failing
anything.  Logs are JSON lines; metrics (:mod:`infrarsi.controller.metrics`) are exported through
prometheus-client from the daemon's own registry: campaigns by state, live trials, cycle and tick durations,
Slurm CLI calls, database statements, ingests and their failures, the lease and campaign faults.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from infrarsi.controller.campaign.engine import CampaignEngine
from infrarsi.controller.errors import ExecutorError, StoreError
from infrarsi.controller.metrics import Metrics, MetricsServer, serve_metrics, watch_ingest  # noqa: F401 (re-exported)
from infrarsi.controller.store.base import FencedError, Store
from infrarsi.controller.store.lease import Heartbeat, LeaseConfig
from infrarsi.controller.store.records import TERMINAL_STATES, CAMPAIGN_STATES

log = logging.getLogger("infrarsi.daemon")


class JsonFormatter(logging.Formatter):
    """One JSON object per log line: time, level, logger, message and any ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": round(record.created, 3), "level": record.levelname.lower(),
                               "logger": record.name, "msg": record.getMessage()}
        for k, v in record.__dict__.items():
            if k.startswith("x_"):
                out[k[2:]] = v
        return json.dumps(out, default=str)


def one_line_reason(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message (at file:line in function)``, at most ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    msg = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if frames:
        f = frames[-1]
        msg += f" (at {f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name})"
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


@dataclass
class _Fault:
    attempts: int
    retry_at: int  # cycle number from which the campaign is ticked again
    reason: str


class Daemon:
    """Tick every open campaign every ``interval_s`` seconds while holding the leader lease.

    ``lease_s``/``renew_s`` default to :class:`LeaseConfig` (``INFRARSI_LEASE_S``, ``INFRARSI_LEASE_RENEW_S``).
    A campaign whose tick raises anything but a store/executor outage is retried after 1, 2, 4, ... cycles;
    after ``retries`` retries it is marked ``failed`` with the one-line reason (in its row and in a
    ``campaign.fault`` event).  Retry counts live in memory: a restarted daemon starts counting afresh."""

    def __init__(self, store: Store, engine: CampaignEngine, interval_s: float = 5.0, metrics: Metrics | None = None,
                 lease_s: float | None = None, renew_s: float | None = None, retries: int = 3,
                 lease_name: str = "daemon"):
        cfg = LeaseConfig.from_env()
        self.store = store
        self.engine = engine
        self.interval_s = interval_s
        self.metrics = metrics if metrics is not None else Metrics()
        engine_sql = getattr(store, "engine", None)  # SqlStore: count its statements from the outside
        if engine_sql is not None:
            self.metrics.watch_engine(engine_sql)
        self.metrics.watch_executors(lambda: list(engine.launcher.executors.values()))
        watch_ingest(self.metrics, getattr(engine, "store", store))
        self.lease = store.lease(lease_name, lease_s=lease_s or cfg.lease_s)
        self.renew_s = renew_s or min(cfg.renew_s, (lease_s or cfg.lease_s) / 3)
        self.retries = retries
        self._faults: dict[int, _Fault] = {}
        self._cycle_no = 0
        self._stop = threading.Event()

    def stop(self, *_: Any) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ one cycle
    def cycle(self) -> int:
        """One pass over open campaigns; returns how many are still open.

        FencedError (this daemon is no longer leader) and StoreError from the daemon's own queries propagate;
        every other fault is confined to the campaign it happened in."""
        t_start = time.monotonic()
        self._cycle_no += 1
        open_campaigns = self.store.list_campaigns([s for s in CAMPAIGN_STATES if s not in TERMINAL_STATES])
        live_now = self.store.live_trials()
        self._prime(live_now)
        draining = {t.campaign_id for t in live_now} - {c.id for c in open_campaigns}
        for c in open_campaigns + [self.store.get_campaign(cid) for cid in sorted(draining)]:
            fault = self._faults.get(c.id)
            if fault is not None and self._cycle_no < fault.retry_at:
                continue  # backing off
            t0 = time.monotonic()
            try:
                after = self.engine.tick(c.id)
            except FencedError:
                raise
            except (StoreError, ExecutorError) as exc:  # transient: retried next cycle, nothing is failed
                self.metrics.tick_errors.inc()
                log.warning("tick failed; will retry", extra={"x_campaign": c.id, "x_error": str(exc)})
                continue
            except Exception as exc:  # noqa: BLE001 - a fault stays inside its campaign
                self._fault(c.id, c.terminal, exc)
                continue
            finally:
                self.metrics.tick_seconds.observe(time.monotonic() - t0)
            self._faults.pop(c.id, None)
            if after.state != c.state:
                log.info("campaign state", extra={"x_campaign": c.id, "x_from": c.state, "x_to": after.state})
            self.metrics.ingest_latency.set(time.monotonic() - t0)
        self.metrics.set_live(self.store.live_trials())
        counts: dict[str, int] = {}
        for c in self.store.list_campaigns():
            counts[c.state] = counts.get(c.state, 0) + 1
        self.metrics.set_campaign_counts(counts)
        elapsed = time.monotonic() - t_start
        self.metrics.poll_seconds.set(elapsed)
        self.metrics.cycle_seconds.observe(elapsed)
        self.metrics.ticks.inc()
        return len(open_campaigns) + len(draining)

    def _prime(self, live: list[Any]) -> None:
        """One batched poll of every live Slurm job before the campaigns are ticked.

        Each campaign's tick polls only its own trials; the Slurm executor serves a poll from its cache while
        every handle in it was seen by its last query and that query is recent, so without this, the first
        cycle after a start (and every cycle in which campaigns have jobs the executor has not seen) made one
        ``squeue`` (and possibly one ``sacct``) per campaign.  Polling all live jobs at once first keeps it at
        one ``squeue`` and at most one ``sacct`` per cycle for all live jobs.  An executor outage here is
        transient: logged, and each campaign's own poll meets it again."""
        from infrarsi.controller.executors.base import JobHandle

        by_backend: dict[str, list[JobHandle]] = {}
        for t in live:
            if t.status == "submitted" and t.job_id and t.executor == "slurm":
                by_backend.setdefault(t.executor, []).append(JobHandle(
                    trial_id=t.trial_key, backend=t.executor, job_id=t.job_id or "",
                    submit_time=t.submit_time or 0.0, outdir=str(t.outdir)))
        for backend, handles in by_backend.items():
            try:
                self.engine.executor(backend).poll(handles)
            except ExecutorError as exc:
                log.warning("batched poll failed; campaigns poll on their own",
                            extra={"x_executor": backend, "x_error": str(exc)})

    def _fault(self, campaign_id: int, terminal: bool, exc: BaseException) -> None:
        """Record one failed tick of a campaign; fail the campaign once its retries are used up."""
        reason = one_line_reason(exc)
        prev = self._faults.get(campaign_id)
        attempt = (prev.attempts if prev else 0) + 1
        self.metrics.tick_errors.inc()
        self.metrics.campaign_faults.inc()
        self.store.add_event("campaign.fault", {"attempt": attempt, "reason": reason}, campaign_id=campaign_id)
        if attempt <= self.retries or terminal:
            backoff = 2 ** min(attempt - 1, self.retries)  # 1, 2, 4, ... cycles (capped while draining)
            self._faults[campaign_id] = _Fault(attempt, self._cycle_no + backoff, reason)
            log.warning("campaign tick failed; retrying", extra={"x_campaign": campaign_id, "x_attempt": attempt,
                                                                 "x_retry_in_cycles": backoff, "x_error": reason})
            return
        self._faults.pop(campaign_id, None)
        error = f"daemon gave up after {attempt} failed ticks: {reason}"
        self.store.update_campaign(campaign_id, state="failed", error=error)
        log.error("campaign failed", extra={"x_campaign": campaign_id, "x_error": error})

    # ------------------------------------------------------------------ leadership
    def run(self, once: bool = False, exit_when_idle: bool = False) -> None:
        """Run until stopped (SIGTERM/SIGINT), after one cycle (``once``), or when no campaign is open."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        standing_by = False
        try:
            while not self._stop.is_set():
                try:
                    got = self.lease.acquire()
                except StoreError as exc:
                    log.error("database unavailable", extra={"x_error": str(exc)})
                    self._stop.wait(self.interval_s)
                    continue
                if not got:
                    self._standby_metrics()
                    if not standing_by:
                        log.info("another daemon holds the leader lease; standing by",
                                 extra={"x_holder": self.metrics.leader_holder})
                        standing_by = True
                    if once:
                        return
                    self._stop.wait(self.interval_s)
                    continue
                standing_by = False
                if self._lead(once, exit_when_idle):
                    return
        finally:
            self.lease.release()
            self.metrics.set_leader(False)

    def _standby_metrics(self) -> None:
        self.metrics.set_leader(False)
        try:
            info = self.store.lease_info(self.lease.name)
        except StoreError:
            return
        if info is not None:
            self.metrics.set_leader(False, holder=info.holder or "", token=info.token)

    def _lead(self, once: bool, exit_when_idle: bool) -> bool:
        """Act while the lease is ours.  True: done (``once``/idle/stopped); False: fenced, back to standby."""
        self.metrics.set_leader(True, holder=self.lease.holder, token=self.lease.token or 0)
        log.info("acting as leader", extra={"x_holder": self.lease.holder, "x_token": self.lease.token})
        self.store.set_fence(self.lease)
        beat = Heartbeat(self.lease, self.renew_s,
                         on_error=lambda e: log.warning("lease renewal failed", extra={"x_error": e})).start()
        try:
            while not self._stop.is_set():
                if beat.lost.is_set():
                    raise FencedError(f"lease '{self.lease.name}' was taken over by another daemon")
                if not self.lease.valid():  # the heartbeat could not renew (database gone): renew or stop acting
                    try:
                        if not self.lease.renew():
                            raise FencedError(f"lease '{self.lease.name}' expired and was taken over")
                    except FencedError:
                        raise
                    except StoreError as exc:
                        log.error("database unavailable; not acting until the lease is renewed",
                                  extra={"x_error": str(exc)})
                        self._stop.wait(self.interval_s)
                        continue
                try:
                    n_open = self.cycle()
                except FencedError:
                    raise
                except StoreError as exc:
                    log.error("database unavailable", extra={"x_error": str(exc)})
                    self._stop.wait(self.interval_s)
                    continue
                if once or (exit_when_idle and n_open == 0):
                    return True
                self._stop.wait(self.interval_s)
            return True
        except FencedError as exc:
            log.warning(f"fenced: {exc}; standing by", extra={"x_token": self.metrics.token})
            self.metrics.set_leader(False)
            return False
        finally:
            beat.stop()
            self.store.set_fence(None)
