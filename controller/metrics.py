"""The daemon's Prometheus metrics, on its own :class:`~prometheus_client.CollectorRegistry`.

Each :class:`Metrics` owns a registry (never the process-global one), so several daemons can live in one process
(tests) without their series colliding.  :func:`serve_metrics` serves ``GET /metrics`` from that registry with
prometheus-client's own WSGI app.  ``docs/operations.md`` lists every series; the names kept from the first,
hand-written exposition are ``infrarsi_ticks_total``, ``infrarsi_tick_errors_total``, ``infrarsi_live_trials``,
``infrarsi_queue_depth``, ``infrarsi_poll_seconds``, ``infrarsi_ingest_latency_seconds``, ``infrarsi_leader``,
``infrarsi_leader_token``, ``infrarsi_leader_info``, ``infrarsi_campaigns`` and ``infrarsi_campaign_faults_total``.

Two things are counted from the outside, without touching the store or executor code:

* database statements: :meth:`Metrics.watch_engine` adds a SQLAlchemy ``before_cursor_execute`` listener to an
  engine (every statement any thread of the process runs on it, the lease heartbeat included);
* Slurm CLI calls: :meth:`Metrics.watch_executors` registers a collector that reads, at scrape time, the per-tool
  invocation counts each executor's :class:`~infrarsi.controller.executors.slurm_cli.SlurmCLI` keeps.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import generate_latest, make_wsgi_app
from prometheus_client.registry import Collector

from infrarsi.controller.store.records import CAMPAIGN_STATES

#: the Slurm tools the executor runs (always exported, 0 until first used)
SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol")
#: trial statuses that count as live in the store
LIVE_STATUSES = ("intent", "submitted")
#: tick duration buckets (seconds): a cycle over 50 campaigns is expected between 0.1 and a few seconds
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _SlurmCalls(Collector):
    """``infrarsi_slurm_calls_total{command}`` read from the executors' own call counts at scrape time."""

    def __init__(self, executors: Callable[[], Iterable[Any]]) -> None:
        self._executors = executors

    def totals(self) -> dict[str, int]:
        out = {c: 0 for c in SLURM_COMMANDS}
        for ex in list(self._executors()):
            calls = getattr(getattr(ex, "cli", None), "calls", None)
            if isinstance(calls, dict):
                for cmd, n in list(calls.items()):
                    out[cmd] = out.get(cmd, 0) + int(n)
        return out

    def collect(self) -> Iterator[Metric]:
        fam = CounterMetricFamily("infrarsi_slurm_calls", "Slurm CLI invocations by the executors, by command",
                                  labels=["command"])
        for cmd, n in sorted(self.totals().items()):
            fam.add_metric([cmd], n)
        yield fam


class Metrics:
    """Every series the daemon exports, registered on ``self.registry``.

    Thread-safe (prometheus-client metrics are).  ``values`` maps a plain (label-free) sample name, e.g.
    ``infrarsi_tick_errors_total``, to its current value, for tests and logs."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ticks = Counter("infrarsi_ticks", "Daemon cycles completed while leading", registry=r)
        self.tick_errors = Counter("infrarsi_tick_errors", "Campaign ticks that raised (transient or fault)",
                                   registry=r)
        self.campaign_faults = Counter("infrarsi_campaign_faults", "Campaign ticks that raised a non-transient "
                                       "fault (recorded as campaign.fault events)", registry=r)
        self.live_trials = Gauge("infrarsi_live_trials", "Trials submitted to an executor and not yet finished",
                                 registry=r)
        self.queue_depth = Gauge("infrarsi_queue_depth", "Trials recorded as intent, not yet submitted",
                                 registry=r)
        self.live_by = Gauge("infrarsi_live_trials_by", "Live trials by executor and store status",
                             ["executor", "state"], registry=r)
        self.poll_seconds = Gauge("infrarsi_poll_seconds", "Duration of the last daemon cycle (seconds)",
                                  registry=r)
        self.cycle_seconds = Histogram("infrarsi_cycle_seconds", "Duration of daemon cycles (seconds)",
                                       buckets=TICK_BUCKETS, registry=r)
        self.tick_seconds = Histogram("infrarsi_tick_seconds", "Duration of one campaign tick (seconds)",
                                      buckets=TICK_BUCKETS, registry=r)
        self.ingest_latency = Gauge("infrarsi_ingest_latency_seconds",
                                    "Duration of the last successful campaign tick (reconcile + ingest + advance)",
                                    registry=r)
        self.ingested = Counter("infrarsi_trials_ingested", "Trials ingested by this daemon, by outcome",
                                ["outcome"], registry=r)
        self.ingest_failures = Counter(
            "infrarsi_ingest_failures", "Finished trials whose receipt could not be verified (no_receipt, "
            "bad_receipt) or whose ingest transaction raised (error)", ["reason"], registry=r)
        self.db_queries = Counter("infrarsi_db_queries", "SQL statements sent to the database by this process",
                                  registry=r)
        self.campaigns = Gauge("infrarsi_campaigns", "Campaigns by state", ["state"], registry=r)
        self.leader = Gauge("infrarsi_leader", "1 while this daemon holds the leader lease", registry=r)
        self.leader_token = Gauge("infrarsi_leader_token", "Fencing token of the lease as last seen", registry=r)
        self.leader_info = Gauge("infrarsi_leader_info", "The lease holder as last seen (value always 1)",
                                 ["holder", "token"], registry=r)
        for state in CAMPAIGN_STATES:
            self.campaigns.labels(state=state).set(0)
        for reason in ("no_receipt", "bad_receipt", "error"):
            self.ingest_failures.labels(reason=reason)
        self._lock = threading.Lock()
        self._holder = ""
        self._token = 0
        self._slurm: _SlurmCalls | None = None
        self._executor_sources: list[Callable[[], Iterable[Any]]] = []
        self._engines: list[Any] = []
        self._set_info()

    # ------------------------------------------------------------------ reading
    @property
    def values(self) -> Mapping[str, float]:
        """Current value of every label-free sample (``_total`` names for counters)."""
        out: dict[str, float] = {}
        for fam in self.registry.collect():
            for s in fam.samples:
                if not s.labels:
                    out[s.name] = s.value
        return out

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """One sample's value (``None`` when absent)."""
        return self.registry.get_sample_value(name, labels or {})

    def render(self) -> str:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry).decode()

    # ------------------------------------------------------------------ leader
    @property
    def leader_holder(self) -> str:
        """The lease holder as last seen (this daemon when leading, the row's holder when standing by)."""
        return self._holder

    @property
    def token(self) -> int:
        """The lease's fencing token as last seen."""
        return self._token

    def set_leader(self, leading: bool, holder: str | None = None, token: int | None = None) -> None:
        """Record whether this daemon leads and, when known, the lease's holder and token."""
        with self._lock:
            self.leader.set(1 if leading else 0)
            if holder is not None:
                self._holder = holder
            if token is not None:
                self._token = int(token)
                self.leader_token.set(self._token)
            self._set_info()

    def _set_info(self) -> None:
        self.leader_info.clear()
        self.leader_info.labels(holder=self._holder, token=str(self._token)).set(1)

    # ------------------------------------------------------------------ per cycle
    def set_campaign_counts(self, counts: Mapping[str, int]) -> None:
        """Campaigns by state (every known state is exported, 0 when empty)."""
        for state in set(CAMPAIGN_STATES) | set(counts):
            self.campaigns.labels(state=state).set(counts.get(state, 0))

    def set_live(self, live: Iterable[Any]) -> None:
        """Live trials (snapshots with ``executor`` and ``status``): totals and by executor x status."""
        counts: dict[tuple[str, str], int] = {}
        for t in live:
            key = (str(t.executor), str(t.status))
            counts[key] = counts.get(key, 0) + 1
        self.live_trials.set(sum(n for (_, st), n in counts.items() if st == "submitted"))
        self.queue_depth.set(sum(n for (_, st), n in counts.items() if st == "intent"))
        seen = {(labels[0], labels[1]) for labels in _label_keys(self.live_by)}
        for ex, st in seen | set(counts):
            self.live_by.labels(executor=ex, state=st).set(counts.get((ex, st), 0))

    # ------------------------------------------------------------------ from the outside
    def watch_engine(self, engine: Any) -> None:
        """Count every SQL statement on a SQLAlchemy ``engine`` (idempotent per engine)."""
        from sqlalchemy import event

        if any(e is engine for e in self._engines):
            return
        counter = self.db_queries

        def _count(*_: Any) -> None:
            counter.inc()

        event.listen(engine, "before_cursor_execute", _count)
        self._engines.append(engine)

    def watch_executors(self, executors: Callable[[], Iterable[Any]]) -> None:
        """Export ``infrarsi_slurm_calls_total{command}`` from the executors ``executors()`` returns."""
        self._executor_sources.append(executors)
        if self._slurm is None:
            self._slurm = _SlurmCalls(lambda: [ex for src in self._executor_sources for ex in src()])
            self.registry.register(self._slurm)

    def slurm_calls(self) -> dict[str, int]:
        """Slurm CLI invocations so far, by command (zeros when no executor is watched)."""
        return self._slurm.totals() if self._slurm is not None else {c: 0 for c in SLURM_COMMANDS}

    def count_ingest(self, outcome: str, signature_ok: bool | None, has_receipt: bool) -> None:
        """One trial ingested: by outcome, and as a failure when its receipt was missing or did not verify."""
        self.ingested.labels(outcome=outcome).inc()
        if not has_receipt and outcome != "cancelled":
            self.ingest_failures.labels(reason="no_receipt").inc()
        elif has_receipt and signature_ok is False:
            self.ingest_failures.labels(reason="bad_receipt").inc()


def _label_keys(gauge: Gauge) -> list[tuple[str, ...]]:
    """The label tuples a labelled gauge has children for."""
    out = []
    for fam in gauge.collect():
        for s in fam.samples:
            out.append(tuple(s.labels[n] for n in gauge._labelnames))  # noqa: SLF001 - read-only
    return out


def watch_ingest(metrics: Metrics, store: Any) -> None:
    """Wrap ``store.ingest`` (on this instance only) so every ingest is counted by outcome and failures by reason.

    The store's own code is untouched; the wrapper delegates to the original bound method and re-raises."""
    original = store.ingest
    if getattr(original, "_infrarsi_metrics", None) is metrics:
        return

    def ingest(trial_id: int, ing: Any) -> bool:
        try:
            done = original(trial_id, ing)
        except Exception:
            metrics.ingest_failures.labels(reason="error").inc()
            raise
        if done:
            metrics.count_ingest(str(ing.outcome), getattr(ing, "signature_ok", None),
                                 getattr(ing, "receipt_raw", None) is not None)
        return done

    ingest._infrarsi_metrics = metrics  # type: ignore[attr-defined]
    store.ingest = ingest


class MetricsServer:
    """A running ``/metrics`` endpoint (prometheus-client's WSGI app on a background thread)."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(metrics: Metrics, port: int, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``GET /metrics`` (and ``/``) from ``metrics.registry`` on ``host:port`` in a daemon thread.

    ``port`` 0 picks a free port (see :attr:`MetricsServer.port`).  Raises OSError when the port is taken."""
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
    from socketserver import ThreadingMixIn

    class _Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class _Quiet(WSGIRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

    app = make_wsgi_app(metrics.registry)
    server = make_server(host, port, app, server_class=_Server, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return MetricsServer(server, thread)
