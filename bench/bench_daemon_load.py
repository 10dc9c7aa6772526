"""The daemon's load, measured: the real ``Daemon.cycle`` on real PostgreSQL with many campaigns and live trials.

Two back ends:

* ``--slurm standin`` (default): the real :class:`SlurmExecutor` with :class:`bench.slurm_standin.SlurmStandin`
  at its command-runner seam (thousands of jobs, simulated time, real signed receipts, every 20th job fails
  without a receipt so ``sacct`` is used);
* ``--slurm real``: the real executor on the real slurmctld (``deploy/slurm-up.sh``), jobs are the toy workload
  under the real exec wrapper; only as many as this machine holds.

Per cycle it records the wall time, the controller's CPU time, the Slurm CLI calls by command (counted by the
executor's own ``SlurmCLI.calls``) and the SQL statements (a SQLAlchemy ``before_cursor_execute`` listener on the
store's engine, via the daemon's metrics).  The stand-in's own CPU (answering commands, writing receipts) is
measured separately and subtracted: it is the cluster's and the jobs' work, not the controller's.

Each benchmark cycle stands for at least the executor's query interval (30 s): the executor's schedule is made
due at the start of every cycle, so every cycle queries Slurm (the worst case for call counts; with the daemon's
default 5 s cycles, most real cycles make no Slurm call at all).

Usage::

    python3 bench/bench_daemon_load.py --campaigns 50 --trials 20 --json /tmp/load.json
    python3 bench/bench_daemon_load.py --slurm real --campaigns 2 --trials 8
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PG_ADMIN = os.environ.get("INFRARSI_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
TOY = REPO / "tests" / "campaign" / "toy"
#: a five-minute trial, the unit the CPU share is stated against
TRIAL_S = 300.0


@dataclass
class CycleStat:
    """One daemon cycle as measured."""

    wall_s: float
    cpu_s: float
    live: int
    slurm: dict[str, int]
    db_queries: int


@dataclass
class LoadResult:
    """What one benchmark run measured (see :func:`summarize`)."""

    backend: str
    campaigns: int
    trials_per_campaign: int
    cycles: list[CycleStat] = field(default_factory=list)
    trials_ingested: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    controller_cpu_s: float = 0.0
    standin_cpu_s: float = 0.0
    wall_s: float = 0.0


def _contract(trials: int, real: bool) -> str:
    """The toy contract with a search space of 216 candidates and ``trials`` concurrent search trials."""
    text = (TOY / "infrarsi.yaml").read_text()
    extra = """  - name: pad
    values: [1, 2, 3, 4, 5, 6]
    reference: 1
    kind: ordered
    apply: {env: TOY_PAD}
  - name: lane
    values: [1, 2, 3, 4, 5, 6]
    reference: 1
    kind: ordered
    apply: {env: TOY_LANE}
"""
    text = text.replace("knobs:\n", "knobs:\n" + extra, 1)
    text = text.replace("  gpu_hours: 1.0\n  trials: 4\n", f"  gpu_hours: 100000.0\n  trials: {trials}\n")
    if not real:
        text = text.replace('time_limit: "00:02:00"', 'time_limit: "00:10:00"')
    return text


def make_repo(dst: Path, trials: int, real: bool) -> Path:
    """A git repo of the toy workload with the benchmark contract."""
    shutil.copytree(TOY, dst, ignore=shutil.ignore_patterns("__pycache__"))
    (dst / "infrarsi.yaml").write_text(_contract(trials, real))
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "bench"]):
        subprocess.run(["git", "-C", str(dst), *args], check=True, env=env)
    return dst


class PgDatabase:
    """A fresh PostgreSQL database for one run, dropped on exit."""

    def __init__(self, admin: str = PG_ADMIN) -> None:
        from sqlalchemy import create_engine

        self.name = f"infrarsi_bench_{uuid.uuid4().hex[:10]}"
        self.admin = create_engine(admin, isolation_level="AUTOCOMMIT")
        self.url = admin.rsplit("/", 1)[0] + f"/{self.name}"

    def __enter__(self) -> "PgDatabase":
        from sqlalchemy import text

        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
        return self

    def __exit__(self, *_: Any) -> None:
        from sqlalchemy import text

        with self.admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = :n AND pid <> pg_backend_pid()"), {"n": self.name})
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}"'))
        self.admin.dispose()


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (git exports run as subprocesses)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run_load(campaigns: int, trials: int, backend: str = "standin", max_cycles: int = 400,
             workdir: Path | None = None, running_steps: int = 5, interval_s: float = 0.0,
             deadline_s: float = 1800.0, progress: bool = False) -> LoadResult:
    """Drive ``Daemon.cycle`` until every campaign is terminal (or ``max_cycles``/``deadline_s``)."""
    tmp = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="infrarsi-load-"))
    tmp.mkdir(parents=True, exist_ok=True)
    real = backend == "real"
    with PgDatabase() as db, _env(tmp, db.url, real):
        from infrarsi.controller.campaign.engine import CampaignEngine
        from infrarsi.controller.campaign.runner import create_campaign
        from infrarsi.controller.daemon import Daemon
        from infrarsi.controller.executors.slurm import SlurmExecutor
        from infrarsi.controller.metrics import Metrics
        from infrarsi.controller.settings import Settings
        from infrarsi.controller.store.migrate import upgrade
        from infrarsi.controller.store.sql import open_store

        from bench.slurm_standin import SlurmStandin

        upgrade(db.url)
        store = open_store(db.url)
        settings = Settings.from_env()
        repo = make_repo(tmp / "repo", trials, real)
        for i in range(campaigns):
            create_campaign(store, settings, repo / "infrarsi.yaml", executor="slurm", seed=i)
        standin = None if real else SlurmStandin(running_steps=running_steps)
        executors: list[SlurmExecutor] = []

        def factory(name: str) -> SlurmExecutor:
            ex = SlurmExecutor(steady_interval_s=30.0, backoff=(), state_dir=tmp / "slurm-state",
                               runner=standin, use_pyslurm=False, receipt_grace_s=5.0 if real else 0.0)
            executors.append(ex)
            return ex

        engine = CampaignEngine(store, settings, factory, partition_limits={})
        metrics = Metrics()
        daemon = Daemon(store, engine, interval_s=interval_s, metrics=metrics, lease_s=120)
        assert daemon.lease.acquire(), "could not take the leader lease"
        store.set_fence(daemon.lease)
        from infrarsi.controller.store.lease import Heartbeat

        beat = Heartbeat(daemon.lease, 20.0).start()  # as Daemon._lead does: the run outlasts one lease
        res = LoadResult(backend=backend, campaigns=campaigns, trials_per_campaign=trials)
        t_run, cpu_run = time.monotonic(), _cpu()
        standin_cpu = 0.0
        try:
            for n in range(max_cycles):
                if standin is not None:
                    c0 = _cpu()
                    standin.advance()
                    standin_cpu += _cpu() - c0
                for ex in executors:  # each cycle stands for >= the 30 s query interval: a query is due
                    ex._next_query_at = 0.0  # noqa: SLF001 - the benchmark's clock, not the executor's
                before_calls = metrics.slurm_calls()
                before_q = int(metrics.sample("infrarsi_db_queries_total") or 0)
                t0, c0 = time.monotonic(), _cpu()
                open_n = daemon.cycle()
                wall, cpu = time.monotonic() - t0, _cpu() - c0
                after = metrics.slurm_calls()
                calls = {k: after[k] - before_calls.get(k, 0) for k in after if after[k] - before_calls.get(k, 0)}
                live = int((metrics.sample("infrarsi_live_trials") or 0) + (metrics.sample("infrarsi_queue_depth")
                                                                              or 0))
                res.cycles.append(CycleStat(wall_s=wall, cpu_s=cpu, live=live, slurm=calls,
                                            db_queries=int(metrics.sample("infrarsi_db_queries_total") or 0)
                                            - before_q))
                if progress:
                    print(f"cycle {n}: {wall:.3f} s, cpu {cpu:.3f} s, live {live}, slurm {calls}, "
                          f"db {res.cycles[-1].db_queries}", file=sys.stderr, flush=True)
                if open_n == 0 or time.monotonic() - t_run > deadline_s:
                    break
                if real:
                    time.sleep(max(interval_s, 1.0))  # real jobs run on their own clock
        finally:
            res.wall_s = time.monotonic() - t_run
            total_cpu = _cpu() - cpu_run
            if standin is not None:
                standin_cpu += getattr(standin, "cpu_s", 0.0)
            res.standin_cpu_s = standin_cpu
            res.controller_cpu_s = total_cpu - standin_cpu
            from sqlalchemy import text

            with store.engine.connect() as conn:
                rows = conn.execute(text("SELECT outcome, COUNT(*) FROM trials WHERE status = 'ingested' "
                                         "GROUP BY outcome")).all()
            res.outcomes = {str(o): int(k) for o, k in rows}
            res.trials_ingested = sum(res.outcomes.values())
            beat.stop()
            daemon.lease.release()
            store.set_fence(None)
            store.engine.dispose()
    if workdir is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


class _env:
    """Environment for one run: INFRARSI_HOME, the database URL, isolation for real trials."""

    def __init__(self, home: Path, url: str, real: bool) -> None:
        self.vars = {"INFRARSI_HOME": str(home / "home"), "INFRARSI_DATABASE_URL": url,
                     "XDG_STATE_HOME": str(home / "state")}
        if real:
            self.vars["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for k, v in self.vars.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *_: Any) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[i]


def summarize(res: LoadResult, interval_s: float = 5.0, running_steps: int = 5) -> dict[str, Any]:
    """Median/p95 cycle time, Slurm calls and SQL statements per cycle over the cycles at >= 90% of peak load,
    and the controller's CPU per trial (measured, and projected to a 5-minute trial polled every ``interval_s``)."""
    peak = max((c.live for c in res.cycles), default=0)
    loaded = [c for c in res.cycles if peak and c.live >= 0.9 * peak] or res.cycles
    per = lambda f: [f(c) for c in loaded]  # noqa: E731
    squeue, sacct = per(lambda c: c.slurm.get("squeue", 0)), per(lambda c: c.slurm.get("sacct", 0))
    cpu_per_trial = res.controller_cpu_s / res.trials_ingested if res.trials_ingested else float("nan")
    # a 5-minute trial stays live for TRIAL_S / interval_s cycles; the run here kept it ~running_steps + 2 cycles
    extra_cycles = max(0.0, TRIAL_S / interval_s - (running_steps + 2))
    poll_cpu_per_trial_cycle = statistics.median(per(lambda c: c.cpu_s / max(1, c.live)))
    projected = cpu_per_trial + extra_cycles * poll_cpu_per_trial_cycle
    return {
        "backend": res.backend, "campaigns": res.campaigns, "trials_per_campaign": res.trials_per_campaign,
        "cycles": len(res.cycles), "peak_live": peak, "loaded_cycles": len(loaded),
        "cycle_s_median": statistics.median(per(lambda c: c.wall_s)),
        "cycle_s_p95": _pct(per(lambda c: c.wall_s), 0.95),
        "cycle_cpu_s_median": statistics.median(per(lambda c: c.cpu_s)),
        "squeue_per_cycle_max": max(squeue), "sacct_per_cycle_max": max(sacct),
        "squeue_per_cycle_all_max": max((c.slurm.get("squeue", 0) for c in res.cycles), default=0),
        "sacct_per_cycle_all_max": max((c.slurm.get("sacct", 0) for c in res.cycles), default=0),
        "sbatch_total": sum(c.slurm.get("sbatch", 0) for c in res.cycles),
        "db_queries_per_cycle_median": statistics.median(per(lambda c: c.db_queries)),
        "db_queries_per_cycle_p95": _pct(per(lambda c: c.db_queries), 0.95),
        "trials_ingested": res.trials_ingested, "outcomes": res.outcomes,
        "controller_cpu_s": round(res.controller_cpu_s, 2), "standin_cpu_s": round(res.standin_cpu_s, 2),
        "wall_s": round(res.wall_s, 1),
        "cpu_per_trial_s": cpu_per_trial,
        "cpu_per_trial_projected_s": projected,
        "cpu_share_of_5min_trial_pct": 100 * projected / TRIAL_S,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--campaigns", type=int, default=50)
    p.add_argument("--trials", type=int, default=20, help="concurrent search trials per campaign (= budget)")
    p.add_argument("--slurm", choices=["standin", "real"], default="standin")
    p.add_argument("--max-cycles", type=int, default=400)
    p.add_argument("--running-steps", type=int, default=5, help="stand-in: cycles a job runs")
    p.add_argument("--json", help="write the summary and per-cycle data here")
    p.add_argument("--progress", action="store_true")
    a = p.parse_args(argv)
    res = run_load(a.campaigns, a.trials, a.slurm, a.max_cycles, running_steps=a.running_steps,
                   progress=a.progress)
    summary = summarize(res, running_steps=a.running_steps)
    print(json.dumps(summary, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps({"summary": summary, "cycles": [asdict(c) for c in res.cycles]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
