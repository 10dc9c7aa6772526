"""``infrarsi serve``: the long-lived controller that advances every open campaign.

Only one daemon acts on a database at a time (:meth:`Store.leader_lock`: a PostgreSQL advisory lock, or a file
lock beside the SQLite database); others stand by and take over when the leader dies.  Each cycle ticks every
non-terminal campaign through the same :class:`CampaignEngine` the embedded mode uses.  Logs are JSON lines;
metrics are served in Prometheus text format.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from infrarsi.controller.campaign.engine import CampaignEngine
from infrarsi.controller.errors import ExecutorError, StoreError
from infrarsi.controller.store.base import Store
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


class Metrics:
    """Counters and gauges rendered in Prometheus text format."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, float] = {"infrarsi_ticks_total": 0, "infrarsi_tick_errors_total": 0,
                                         "infrarsi_live_trials": 0, "infrarsi_queue_depth": 0,
                                         "infrarsi_poll_seconds": 0.0, "infrarsi_ingest_latency_seconds": 0.0,
                                         "infrarsi_leader": 0}
        self.campaigns: dict[str, int] = {}

    def set(self, name: str, value: float) -> None:
        with self.lock:
            self.values[name] = value

    def inc(self, name: str, by: float = 1) -> None:
        with self.lock:
            self.values[name] = self.values.get(name, 0) + by

    def render(self) -> str:
        with self.lock:
            lines = []
            for k, v in sorted(self.values.items()):
                kind = "counter" if k.endswith("_total") else "gauge"
                lines += [f"# TYPE {k} {kind}", f"{k} {v}"]
            lines.append("# TYPE infrarsi_campaigns gauge")
            for state in CAMPAIGN_STATES:
                lines.append(f'infrarsi_campaigns{{state="{state}"}} {self.campaigns.get(state, 0)}')
            return "\n".join(lines) + "\n"


def serve_metrics(metrics: Metrics, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Start a background HTTP server answering ``GET /metrics``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path.rstrip("/") != "/metrics":
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Daemon:
    """Tick every open campaign every ``interval_s`` seconds while holding the leader lock."""

    def __init__(self, store: Store, engine: CampaignEngine, interval_s: float = 5.0, metrics: Metrics | None = None):
        self.store = store
        self.engine = engine
        self.interval_s = interval_s
        self.metrics = metrics or Metrics()
        self._stop = threading.Event()

    def stop(self, *_: Any) -> None:
        self._stop.set()

    def cycle(self) -> int:
        """One pass over open campaigns; returns how many are still open."""
        t_start = time.monotonic()
        open_campaigns = self.store.list_campaigns([s for s in CAMPAIGN_STATES if s not in TERMINAL_STATES])
        draining = {t.campaign_id for t in self.store.live_trials()} - {c.id for c in open_campaigns}
        for c in open_campaigns + [self.store.get_campaign(cid) for cid in sorted(draining)]:
            t0 = time.monotonic()
            try:
                after = self.engine.tick(c.id)
            except (StoreError, ExecutorError) as exc:
                self.metrics.inc("infrarsi_tick_errors_total")
                log.warning("tick failed; will retry", extra={"x_campaign": c.id, "x_error": str(exc)})
                continue
            if after.state != c.state:
                log.info("campaign state", extra={"x_campaign": c.id, "x_from": c.state, "x_to": after.state})
            self.metrics.set("infrarsi_ingest_latency_seconds", time.monotonic() - t0)
        live = self.store.live_trials()
        self.metrics.set("infrarsi_live_trials", sum(1 for t in live if t.status == "submitted"))
        self.metrics.set("infrarsi_queue_depth", sum(1 for t in live if t.status == "intent"))
        self.metrics.set("infrarsi_poll_seconds", time.monotonic() - t_start)
        self.metrics.inc("infrarsi_ticks_total")
        counts: dict[str, int] = {}
        for c in self.store.list_campaigns():
            counts[c.state] = counts.get(c.state, 0) + 1
        self.metrics.campaigns = counts
        return len(open_campaigns) + len(draining)

    def run(self, once: bool = False, exit_when_idle: bool = False) -> None:
        """Run until stopped (SIGTERM/SIGINT), after one cycle (``once``), or when no campaign is open."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        while not self._stop.is_set():
            with self.store.leader_lock() as leader:
                if not leader:
                    self.metrics.set("infrarsi_leader", 0)
                    log.info("another daemon holds the leader lock; standing by")
                    if once:
                        return
                    self._stop.wait(self.interval_s)
                    continue
                self.metrics.set("infrarsi_leader", 1)
                log.info("acting as leader")
                while not self._stop.is_set():
                    try:
                        n_open = self.cycle()
                    except StoreError as exc:
                        log.error("database unavailable", extra={"x_error": str(exc)})
                        self._stop.wait(self.interval_s)
                        continue
                    if once or (exit_when_idle and n_open == 0):
                        return
                    self._stop.wait(self.interval_s)
