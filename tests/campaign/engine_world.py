"""A fast campaign world for unit tests: the toy contract in its own git repo, an in-memory store and an
in-process executor whose jobs write real signed receipts (step time ``base / speed``), no subprocess per trial."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from infrarsi.controller.campaign.engine import CampaignEngine
from infrarsi.controller.campaign.runner import create_campaign
from infrarsi.controller.executors.base import JobHandle, TrialSpec
from infrarsi.controller.executors.inprocess import (
    InProcessCluster, InProcessExecutor, JobFn, TrialRun, knob, scripted_receipt,
)
from infrarsi.controller.settings import Settings
from infrarsi.controller.store.memory import MemoryDatabase, MemoryStore
from infrarsi.controller.store.records import CampaignRecord
from tests.campaign.helpers import TOY, git_repo

BASE_STEP_S = 0.08


def speed_of(run: TrialRun) -> int:
    return int(knob(run, "speed") or 1)


def toy_job(**kw: Any) -> JobFn:
    """The toy's behaviour scripted: step time ``BASE_STEP_S / speed``."""
    return scripted_receipt(step_time_s=lambda r: BASE_STEP_S / speed_of(r), **kw)


@dataclass
class World:
    tmp: Path
    repo: Path
    settings: Settings
    db: MemoryDatabase = field(default_factory=MemoryDatabase)
    cluster: InProcessCluster = field(default_factory=InProcessCluster)
    log: list[str] = field(default_factory=list)

    def executor(self, fn: JobFn | None = None, slots: int | None = 2) -> InProcessExecutor:
        return InProcessExecutor(fn or toy_job(), slots=slots, cluster=self.cluster)

    def engine(self, ex: InProcessExecutor | None = None, **kw: Any) -> CampaignEngine:
        """A new engine (a fresh "process") over the same memory database and cluster."""
        ex = ex or self.executor()
        return CampaignEngine(MemoryStore(self.db), self.settings, lambda name: ex, progress=self.log.append, **kw)

    def campaign(self, engine: CampaignEngine, **kw: Any) -> CampaignRecord:
        return create_campaign(engine.store, self.settings, self.repo / "infrarsi.yaml", executor="inprocess", **kw)


def make_world(tmp: Path) -> World:
    repo = git_repo(TOY, tmp / "toy")
    home = tmp / "home"
    settings = Settings(home=home, database_url="memory://", scratch=tmp / "scratch", key_file=home / "signing.key")
    return World(tmp=tmp, repo=repo, settings=settings)


def run_until(engine: CampaignEngine, cid: int, done: Callable[[CampaignRecord], bool],
              max_ticks: int = 100, seconds: float | None = None) -> CampaignRecord:
    """Tick until ``done(campaign)`` (a deadline in ticks, not in sleeps); AssertionError when it never is.

    ``seconds``: a deadline in seconds instead, for campaigns that wait on a background thread (a proposer's
    answer): an idle engine ticks faster than a loaded machine answers."""
    import time

    c = engine.store.get_campaign(cid)
    deadline = None if seconds is None else time.monotonic() + seconds
    ticks = 0
    while (time.monotonic() < deadline) if deadline is not None else (ticks < max_ticks):
        if done(c):
            return c
        c = engine.tick(cid)
        ticks += 1
    assert done(c), f"campaign {cid} stuck in {c.state} ({c.error}) after {ticks} ticks"
    return c


def finished_campaign(tmp: Path) -> tuple[World, CampaignEngine, CampaignRecord]:
    """A toy campaign run to ``done`` in a new world (for module fixtures of tests that read a finished one)."""
    world = make_world(tmp)
    eng = world.engine()
    c = run_until(eng, world.campaign(eng).id, lambda c: c.terminal)
    assert c.state == "done", c.error
    return world, eng, c


class Died(BaseException):
    """The controller process dying (nothing below may catch it)."""


class DiesAfterSubmit(InProcessExecutor):
    """Submits the job, then the controller dies before it records the job id."""

    def submit(self, spec: TrialSpec) -> JobHandle:
        super().submit(spec)
        raise Died("killed between the submit and recording its job id")


class DiesBeforeSubmit(InProcessExecutor):
    """The controller dies after the intent, before the submit."""

    def submit(self, spec: TrialSpec) -> JobHandle:
        raise Died("killed after the intent, before the submit")
