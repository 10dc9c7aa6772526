"""Creating campaigns and driving them in-process (the embedded mode behind ``infrarsi init|doctor|run``).

The embedded mode and the daemon share :class:`~infrarsi.controller.campaign.engine.CampaignEngine`; this module only
decides *which* campaign a command in a target repo means and loops ``tick`` until a target state.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Callable

from infrarsi.controller.campaign.engine import CampaignEngine
from infrarsi.controller.contract import contract_digest, load_contract, repo_dir
from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.executors.base import Executor
from infrarsi.controller.settings import Settings
from infrarsi.controller.store.base import Store
from infrarsi.controller.store.records import CampaignRecord

STATE_ORDER = ("init", "doctor", "run", "verify", "report", "done")


def executor_factory(settings: Settings) -> Callable[[str], Executor]:
    """Build executors by name from the environment (``INFRARSI_LOCAL_SLOTS``, ``INFRARSI_POLL_S``)."""
    from infrarsi.controller.config import daemon_config
    from infrarsi.controller.executors import make_executor

    cfg = daemon_config()

    def make(name: str) -> Executor:
        kw: dict = dict(cfg.executor.options) if cfg.executor.name == name else {}
        if name == "local":
            if os.environ.get("INFRARSI_LOCAL_SLOTS") or "max_concurrent" not in kw:
                kw["max_concurrent"] = int(os.environ.get("INFRARSI_LOCAL_SLOTS", "1"))
            return make_executor("local", **kw)
        if name == "slurm":
            kw.setdefault("state_dir", settings.home / "slurm")
            if os.environ.get("INFRARSI_POLL_S"):
                kw["steady_interval_s"] = float(os.environ["INFRARSI_POLL_S"])
            try:
                return make_executor("slurm", **kw)
            except TypeError as exc:
                raise InfrarsiError(f"executor.options: {exc}") from None
        raise InfrarsiError(f"executor: unknown backend '{name}' (local or slurm)")

    return make


def create_campaign(store: Store, settings: Settings, contract_path: str | Path, executor: str = "local",
                    workload: str | None = None, seed: int = 0, owner: str | None = None,
                    sbatch: dict | None = None) -> CampaignRecord:
    """Validate the contract and record a new campaign in state ``init``.  Nothing runs yet.

    ``sbatch`` holds ``infrarsi submit``'s sbatch options (``campaign.sbatch_options.SbatchOptions.to_dict``),
    already checked against the admins' limits; its partition wins over the workload's and the contract's."""
    path = Path(contract_path).resolve()
    contract = load_contract(path)
    wl = store.get_workload(workload) if workload else None
    workdir = settings.scratch / f"{contract.name}-{uuid.uuid4().hex[:8]}"
    return store.create_campaign(
        name=contract.name, workload_id=wl.id if wl else None, owner=owner,
        contract_path=str(path), contract_yaml=path.read_text(), contract_digest=contract_digest(contract),
        repo_path=str(repo_dir(contract, path)), workdir=str(workdir), executor=executor,
        partition=(sbatch or {}).get("partition") or (wl.partition if wl else None) or contract.launch.partition,
        budget_gpu_hours=contract.budget.gpu_hours, budget_trials=contract.budget.trials, seed=seed,
        **({"sbatch": dict(sbatch)} if sbatch else {}),
    )


def find_campaign(store: Store, contract_path: str | Path, include_terminal: bool = False) -> CampaignRecord | None:
    """The newest campaign for this contract file whose contract is unchanged (non-terminal unless asked)."""
    path = Path(contract_path).resolve()
    contract = load_contract(path)
    digest = contract_digest(contract)
    for c in store.list_campaigns():
        if c.contract_path == str(path) and c.contract_digest == digest and (include_terminal or not c.terminal):
            return c
    return None


def drive(engine: CampaignEngine, campaign_id: int, until: str = "done", poll_s: float = 0.5,
          drain_after_s: float | None = None) -> CampaignRecord:
    """Tick ``campaign_id`` until it reaches ``until`` (or later) or a terminal state.

    With ``drain_after_s``, stop launching new trials after that many seconds, wait for the live ones to be
    ingested, and return (the campaign stays resumable: run again to continue).  A drain never stops where the
    next tick needs no new trial: while a tick still advances the state (the last promotion run ingested:
    ``verify -> report``; ``report -> done``) it ticks on, so finished verification always gets its report."""
    target = STATE_ORDER.index(until)
    start = time.monotonic()
    prev: str | None = None
    while True:
        draining = drain_after_s is not None and time.monotonic() - start >= drain_after_s
        if draining:
            engine.paused = True
        c = engine.tick(campaign_id)
        if c.terminal or (c.state in STATE_ORDER and STATE_ORDER.index(c.state) >= target):
            return c
        advanced = c.state != prev
        prev = c.state
        if draining:
            if advanced or c.state == "report":
                continue  # a state change may need no launch (verify -> report -> done): tick on at once
            if not engine.store.live_trials([campaign_id]):
                return c
        time.sleep(poll_s)
