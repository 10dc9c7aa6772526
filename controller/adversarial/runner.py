"""Runs the adversarial matrix: each attack as a real trial through the controller's own trial path.

For one case, :func:`run_case` builds its world (:mod:`infrarsi.controller.adversarial.world`), then chains the
same functions as :class:`~infrarsi.controller.campaign.engine.CampaignEngine`: ``lock_scope`` (with patch intake),
``render_launch`` + ``prepare_source``, ``build_spec``, a real executor (``LocalExecutor``, or ``SlurmExecutor``
with ``executor="slurm"``), polling until the executor reports the job finished, and ``build_ingest`` against two
reference receipts produced the same way.  The controller's environment is what a real controller has:
``INFRARSI_HOME`` (where the master key lives) and, for ``env_read``, ``INFRARSI_DATABASE_URL`` with a password.

What the run left behind is collected into an :class:`~infrarsi.controller.adversarial.cases.Observation`; the
case's predicate decides agreement, and any change to what is recorded (the user's repo, victims, master key)
disagrees whatever the predicate says.  Processes the attack leaves running are killed (by pid) after the check.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import time
import tracemalloc
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from infrarsi.controller.adversarial.cases import CASES, Case, Observation, get_case
from infrarsi.controller.adversarial.world import World, build_world, snapshot
from infrarsi.controller.campaign.ingest import build_ingest
from infrarsi.controller.campaign.scope import lock_scope
from infrarsi.controller.campaign.sourcetree import prepare_source, remove_source
from infrarsi.controller.campaign.trialspec import build_spec, judge_spec_dict, trial_dirs
from infrarsi.controller.contract.launch import render_launch
from infrarsi.controller.contract.loader import contract_digest, load_contract
from infrarsi.controller.contract.model import Contract
from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.executors.base import Executor
from infrarsi.controller.store.records import Ingest, TrialRecord
from infrarsi.controller.store.stage_records import Scope
from infrarsi.verifier.receipt import Receipt
from infrarsi.verifier.spec import JudgeSpec

PG_ADMIN = os.environ.get("INFRARSI_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
#: the engine ingests a finished trial on its next tick; this mirrors its shortest poll interval
SETTLE_S = 0.5
TRIAL_TIMEOUT_S = 240.0
LOG_READ_BYTES = 2 * 1024 * 1024


@dataclass
class AdvResult:
    """One judged case.  ``skipped`` is a reason when the case could not run here (e.g. no PostgreSQL)."""

    case: Case
    obs: Observation
    agree: bool
    why: str
    seconds: float
    skipped: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON row."""
        return {"case": self.case.name, "expect": self.case.expect, "got": self.obs.label, "agree": self.agree,
                "why": self.why, "seconds": round(self.seconds, 2), "skipped": self.skipped,
                "changed": self.obs.changed}


@dataclass
class _Trial:
    ingest: Ingest | None
    receipt: Receipt | None
    out: Path
    error: str | None = None


def make_executor(kind: str, state_dir: Path) -> Executor:
    """A fresh executor of ``kind`` (``local`` or ``slurm``); ValueError for anything else."""
    if kind == "local":
        from infrarsi.controller.executors.local import LocalExecutor

        return LocalExecutor(max_concurrent=1)
    if kind == "slurm":
        from infrarsi.controller.executors.slurm import SlurmExecutor

        return SlurmExecutor(state_dir=state_dir, backoff=(0.5,), steady_interval_s=0.5, receipt_grace_s=2.0)
    raise ValueError(f"--executor {kind!r}: expected 'local' or 'slurm'")


@contextmanager
def _controller_env(values: dict[str, str]) -> Iterator[None]:
    """Set the controller's environment for the run (restored afterwards)."""
    old = {k: os.environ.get(k) for k in (*values, "INFRARSI_KEY_FILE", "INFRARSI_SCRATCH")}
    os.environ.pop("INFRARSI_KEY_FILE", None)
    os.environ.pop("INFRARSI_SCRATCH", None)
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Campaign:
    """The trial path of one world: scope lock, launches, ingestion (the engine's functions, in its order)."""

    def __init__(self, w: World, executor: Executor, master: bytes) -> None:
        self.w = w
        self.ex = executor
        self.master = master
        self.contract: Contract = load_contract(w.contract_path)
        self.digest = contract_digest(self.contract)
        self.scope: Scope | None = None
        self.spec: JudgeSpec | None = None

    def lock(self) -> dict[str, str]:
        """lock_scope with patch intake; returns the refused patches (InfrarsiError propagates)."""
        scope = Scope(**lock_scope(self.w.repo, self.contract, self.digest))
        self.scope = scope.replace(judge_spec=judge_spec_dict(self.contract, scope))
        self.spec = JudgeSpec.from_dict(self.scope.judge_spec)
        return dict(self.scope.refused_patches)

    def intake_only(self) -> dict[str, str]:
        """Patch intake alone (when the scope lock refused the campaign, its patches are still judged)."""
        from infrarsi.controller.campaign.scope import intake_patches

        try:  # intake judges patches by the contract's globs; the expanded lists are not needed here
            return intake_patches(self.w.repo, self.contract, [], [])[1]
        except InfrarsiError as exc:
            return {"(intake)": str(exc)}

    def prepare(self, key: str, patches: list[str]) -> Path:
        """prepare_source for a launch of the reference config with ``patches`` (PatchError/ScopeError raise)."""
        config = self.contract.reference_config
        plan = render_launch(self.contract, config)
        src, _ = trial_dirs(self.w.campaign, key)
        scope = self._locked()
        return prepare_source(self.w.repo, scope.commit, src, [(n, scope.patches[n]) for n in patches],
                              plan.config_edits, scope.prefix)

    def _locked(self) -> Scope:
        if self.scope is None:
            raise InfrarsiError("the adversarial campaign has no scope: lock() it first")
        return self.scope

    def run(self, stage: str, patches: list[str], refs: list[Receipt]) -> _Trial:
        """Launch one trial, wait for the executor to report it finished, ingest it like the engine does."""
        key = uuid.uuid4().hex
        src, out = trial_dirs(self.w.campaign, key)
        try:
            workdir = self.prepare(key, patches)
        except InfrarsiError as exc:
            return _Trial(None, None, out, error=str(exc))
        config = self.contract.reference_config
        spec = build_spec(self.contract, self._locked(), config, key, workdir, out, self.master, None)
        handle = self.ex.submit(spec)
        deadline = time.monotonic() + TRIAL_TIMEOUT_S
        while True:
            st = self.ex.poll([handle])[key]
            if st.state in ("finished", "lost"):
                break
            if time.monotonic() > deadline:
                self.ex.cancel(handle)
                st = self.ex.poll([handle])[key]
                break
            time.sleep(0.2)
        time.sleep(SETTLE_S)
        outcome = st.outcome or "crash"
        trial = TrialRecord(id=0, campaign_id=0, seq=0, trial_key=key, stage=stage, config=dict(config),
                            patches=list(patches), signature="", group_key=None, status="finished",
                            outcome=outcome, reason=st.reason, executor=self.ex.backend, job_id=handle.job_id,
                            submit_time=handle.submit_time, start_time=st.start_time, end_time=st.end_time,
                            gpus=0, partition=None, attempt=1, outdir=str(out))
        assert self.spec is not None
        tracemalloc.start()
        try:
            ing, receipt = build_ingest(trial, outcome, st.reason or "", st.start_time, st.end_time, self.master,
                                        refs, self.spec, 1, self.contract.memory_cap_gib)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        ing.details["adv_ingest_peak_bytes"] = peak
        remove_source(self.w.repo, src)
        return _Trial(ing, receipt, out)


def _try_prepare(camp: _Campaign, w: World) -> str | None:
    """Build (then remove) one fresh trial tree of the reference: the step a planted hook or a symlinked config
    would act on.  The one-line error, or None when it went through."""
    key = uuid.uuid4().hex
    try:
        camp.prepare(key, [])
        return None
    except InfrarsiError as exc:
        return str(exc)
    finally:
        remove_source(w.repo, trial_dirs(w.campaign, key)[0])


def _survivors(mark: str) -> list[int]:
    """Pids whose command line carries the case's survivor marker."""
    needle = f"{mark}-survivor".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "cmdline").read_bytes():
                pids.append(int(d.name))
        except OSError:
            continue
    return sorted(pids)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _read_log(out: Path) -> tuple[str, int]:
    path = out / "job.log"
    if not path.is_file():
        return "", 0
    with path.open("rb") as fh:
        head = fh.read(LOG_READ_BYTES)
    return head.decode("utf-8", "replace"), path.stat().st_size


def _observe_trial(obs: Observation, t: _Trial) -> None:
    obs.log_text, obs.log_bytes = _read_log(t.out)
    if t.error is not None:
        obs.stage_error = t.error
        return
    ing = t.ingest
    assert ing is not None
    obs.outcome, obs.reason, obs.first_failed_layer = ing.outcome, ing.reason, ing.first_failed_layer
    obs.rejecting = [v.invariant for v in ing.verdicts if v.required and v.status in ("fail", "unchecked")]
    obs.trial_step_s = ing.step_time_s
    obs.ingest_peak_bytes = ing.details.get("adv_ingest_peak_bytes")
    raw = ing.receipt_raw or b""
    if len(raw) < 8 * 1024 * 1024:
        try:
            obs.receipt = json.loads(raw) if raw else None
        except ValueError:
            obs.receipt = None
    else:
        obs.receipt = {"adv_forged": "(oversized)"} if b'"adv_forged"' in raw else {}


class _Database:
    """A throwaway PostgreSQL database with a ``campaigns`` table (the env_read victim)."""

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self.psycopg = psycopg
        self.admin = admin_url.replace("postgresql+psycopg://", "postgresql://")
        self.name = f"infrarsi_adv_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin, autocommit=True, connect_timeout=5) as c:
            c.execute(f'CREATE DATABASE "{self.name}"')
        base = self.admin.rsplit("/", 1)[0].split("://", 1)[1].split("@", 1)[-1]
        #: what the controller's environment carries: a URL with a password
        self.url = f"postgresql://postgres:adv-secret-{uuid.uuid4().hex[:8]}@{base}/{self.name}"
        self._direct = self.admin.rsplit("/", 1)[0] + f"/{self.name}"
        with psycopg.connect(self._direct, autocommit=True) as c:
            c.execute("CREATE TABLE campaigns (id integer PRIMARY KEY, delivered_speedup double precision)")
            c.execute("INSERT INTO campaigns VALUES (1, 1.0)")

    def value(self) -> float | None:
        with self.psycopg.connect(self._direct, autocommit=True) as c:
            row = c.execute("SELECT delivered_speedup FROM campaigns WHERE id = 1").fetchone()
        return None if row is None else float(row[0])

    def drop(self) -> None:
        with self.psycopg.connect(self.admin, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                      "AND pid <> pg_backend_pid()", (self.name,))
            c.execute(f'DROP DATABASE IF EXISTS "{self.name}"')


def _attack(camp: _Campaign, case: Case, obs: Observation, refs: list[Receipt], db: _Database | None) -> None:
    """Launch the attack trial and gather the case-specific evidence."""
    w = camp.w
    attack = list(camp.scope.patches) if camp.scope else []
    if not attack:
        return  # every attack patch was refused at intake
    t = camp.run("search", attack, refs)
    _observe_trial(obs, t)
    if case.name == "detached_survivor":
        time.sleep(1.0)
        obs.survivors = _survivors(w.mark)
        after = camp.run("reference", [], [])
        obs.after_ref_step_s = after.ingest.step_time_s if after.ingest else None
    if case.name == "git_hook":
        err = _try_prepare(camp, w)
        if err is not None:
            obs.stage_error = f"next prepare_source failed: {err}"
        obs.hook_ran = Path(f"/tmp/{w.mark}-hook-ran").exists()
    if db is not None:
        obs.db_value = db.value()


def run_case(case: Case | str, executor: str = "local", keep: Path | None = None,
             db_admin_url: str | None = None) -> AdvResult:
    """Run one adversarial case end to end and judge it (see the module docstring).

    ``keep``: leave the world (repo, trials, logs) under this directory instead of deleting it.
    ``db_admin_url``: PostgreSQL admin URL for ``env_read`` (default ``$INFRARSI_TEST_PG`` or local postgres);
    without a reachable server the case is returned with ``skipped`` set.
    """
    case = get_case(case) if isinstance(case, str) else case
    t0 = time.monotonic()
    obs = Observation()
    db: _Database | None = None
    if case.needs_db:
        try:
            db = _Database(db_admin_url or PG_ADMIN)
        except Exception as exc:  # noqa: BLE001 - any driver/connection problem means "no PostgreSQL here"
            return AdvResult(case, obs, False, "", 0.0, skipped=f"PostgreSQL unavailable ({type(exc).__name__})")
    w = build_world(case.name, keep)
    env = {"INFRARSI_HOME": str(w.home)}
    if db is not None:
        env["INFRARSI_DATABASE_URL"] = db.url
    try:
        with _controller_env(env):
            from infrarsi.controller.settings import Settings

            master = Settings.from_env().master_key()
            before = snapshot(w)
            camp = _Campaign(w, make_executor(executor, w.root / "executor-state"), master)
            try:
                obs.refused = camp.lock()
            except InfrarsiError as exc:
                obs.stage_error = f"scope lock: {exc}"
                obs.refused = camp.intake_only()
            if obs.stage_error is None and not case.runs:
                err = _try_prepare(camp, w)
                if err is not None:
                    obs.stage_error = f"prepare_source: {err}"
            if obs.stage_error is None and case.runs:
                refs_t = [camp.run("reference", [], []) for _ in range(2)]
                refs = [t.receipt for t in refs_t if t.receipt is not None and t.ingest and t.ingest.outcome == "ok"]
                steps = [t.ingest.step_time_s for t in refs_t if t.ingest and t.ingest.step_time_s]
                obs.ref_step_s = statistics.median(steps) if steps else None
                if len(refs) < 2:
                    bad = next((t for t in refs_t if t.receipt not in refs), refs_t[0])
                    obs.stage_error = f"reference runs failed: {bad.error or (bad.ingest and bad.ingest.reason)}"
                else:
                    _attack(camp, case, obs, refs, db)
            after = snapshot(w)
            obs.changed = [f"{k} changed" for k in before if before[k] != after.get(k)]
    finally:
        _kill(_survivors(w.mark))
        Path(f"/tmp/{w.mark}-hook-ran").unlink(missing_ok=True)
        if db is not None:
            try:
                db.drop()
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass
        if keep is None:
            shutil.rmtree(w.root, ignore_errors=True)
    ok, why = case.judge(obs)
    if obs.changed:
        ok, why = False, "; ".join(obs.changed) + ("" if why == "ok" else f"; {why}")
    return AdvResult(case, obs, ok, why, time.monotonic() - t0)


def run_adversarial(only: list[str] | None = None, executor: str = "local", keep: Path | None = None,
                    db_admin_url: str | None = None) -> list[AdvResult]:
    """Run every case (or those named in ``only``) one after another; ValueError for an unknown name."""
    cases = [get_case(n) for n in only] if only else list(CASES)
    return [run_case(c, executor, keep, db_admin_url) for c in cases]


def format_adversarial(results: list[AdvResult]) -> str:
    """Aligned table (case, expected, observed, ok) with the failing predicate, ending with ``agreement: N/M``."""
    rows = [("case", "ok", "expected", "observed")]
    for r in results:
        ok = "skip" if r.skipped else ("yes" if r.agree else "NO")
        rows.append((r.case.name, ok, r.case.expect, r.skipped or r.obs.label))
    width = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join([c.ljust(width[i]) for i, c in enumerate(row[:3])] + [row[3]]) for row in rows]
    for r in results:
        if not r.agree and not r.skipped:
            lines.append(f"--- {r.case.name}: {r.why}")
    counted = [r for r in results if not r.skipped]
    lines.append(f"agreement: {sum(r.agree for r in counted)}/{len(counted)}")
    return "\n".join(lines)
