"""The storage contract.  Every persistent fact about workloads, campaigns and trials goes through it.

Contract for implementations (the SQL one in :mod:`infrarsi.controller.store.sql` serves PostgreSQL and SQLite):

- Methods return immutable snapshots from :mod:`infrarsi.controller.store.records`, never live ORM objects.
- Every method is one transaction: it either happens entirely or not at all.  In particular
  :meth:`Store.ingest` writes the receipt, verdicts, observation, cost entry, the trial's outcome and an event
  together, and is idempotent: ingesting a trial whose status is already ``ingested`` changes nothing and
  returns False.
- Trial lifecycle: :meth:`add_trial_intent` records the intent to submit *before* the executor is called
  (status ``intent``); :meth:`mark_submitted` records the job id after; a restart that finds an ``intent`` row
  asks the executor whether the job exists (adoption) or submits it again under the same trial key.
- The ``events`` table is append-only (enforced by a database trigger).
- Unreachable databases raise :class:`infrarsi.controller.errors.StoreError` with a one-line message.
- Leadership (the daemon): :meth:`Store.lease` returns a :class:`LeaderLease` (a row with an expiry and a fencing
  token, see :mod:`infrarsi.controller.store.lease`).  After :meth:`Store.set_fence`, every write transaction of
  this store checks that lease's token before it commits and raises :class:`FencedError` (nothing written) once a
  newer token exists or the lease expired locally; :meth:`Store.check_fence` does the same check before a side
  effect outside the database.  Without a fence (``infrarsi run``, the CLI) writes are not checked.
- Identity (migration 0004): :meth:`Store.identity` is who this store acts as: the session's ``current_user`` on
  PostgreSQL, the OS user (``pwd``) on SQLite; it is the owner of a campaign created without an explicit owner and
  the ``actor`` of every event written.  On PostgreSQL the database enforces it (an owner trigger, row-level
  security; ``docs/admin.md``): a researcher sees only their own campaigns and their rows, and changes one only
  through :meth:`Store.cancel_campaign`.  These methods have defaults so wrappers of a Store keep working.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

from infrarsi.controller.errors import StoreError
from infrarsi.controller.experience.records import Effect, Environment, Observation
from infrarsi.controller.store.records import (
    AuditEvent, CampaignRecord, LeaseRecord, Ingest, ObservationRecord, ProposerRequestRecord, StoredReceipt, TrialRecord,
    VerdictItem, WorkloadRecord,
)

PROPOSER_OUTCOMES = ("ok", "failed")


def clean_proposer_request(**f: Any) -> dict[str, Any]:
    """The fields of one proposer-ledger row, checked and normalised (shared by every Store): counts are
    non-negative integers, ``usd``/``wall_s`` finite and non-negative, ``reason`` one line of at most 500
    characters, text fields cut to their column widths.  ValueError (one line) names the first bad field."""
    import math

    from infrarsi.controller.errors import one_line

    if f["outcome"] not in PROPOSER_OUTCOMES:
        raise ValueError(f"proposer request outcome must be ok or failed, not {str(f['outcome'])[:40]!r}")
    for k in ("tokens_in", "tokens_out", "n_priors", "n_patches"):
        v = f[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"proposer request {k} must be a non-negative integer, not {v!r}")
    for k in ("usd", "wall_s"):
        v = f[k]
        if v is None and k == "usd":
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise ValueError(f"proposer request {k} must be a finite number >= 0, not {v!r}")
        f[k] = float(v)
    widths = {"stage": 20, "proposer": 60, "kind": 20, "request": 20, "model": 200, "prompt_digest": 64}
    for k, w in widths.items():
        f[k] = str(f[k])[:w]
    f["reason"] = one_line(f["reason"] or "", 500)
    return f


class FencedError(StoreError):
    """This process's leader lease was taken over or expired: the write was refused (one-line message)."""


class LeaderLease(ABC):
    """A named lease with a fencing token (contract in :mod:`infrarsi.controller.store.lease`)."""

    name: str
    holder: str
    #: state every implementation keeps: the token while held, and until when (by ``_clock``, a local monotonic
    #: clock) it may act without renewing; ``_lock`` guards the pair
    _token: int | None
    _valid_until: float
    _clock: Callable[[], float]
    _lock: threading.Lock

    @property
    def token(self) -> int | None:
        """The fencing token while held (None when not held)."""
        return self._token

    @abstractmethod
    def acquire(self) -> bool:
        """Take the lease when free or expired (or renew it when held); True when held now."""

    @abstractmethod
    def renew(self) -> bool:
        """Extend the lease; False when superseded by another holder."""

    @abstractmethod
    def release(self) -> None:
        """Give the lease up now (best effort, never raises)."""

    def valid(self) -> bool:
        """Held and not expired by the local monotonic clock."""
        with self._lock:
            return self._token is not None and self._clock() < self._valid_until

    @abstractmethod
    def check(self) -> None:
        """FencedError unless this holder's token is still the current one and the lease has not expired."""


class Store(ABC):
    """Abstract storage interface (see the module docstring for the contract)."""

    # workloads --------------------------------------------------------------
    @abstractmethod
    def register_workload(self, name: str, owner: str, contract_yaml: str, contract_digest: str,
                          partition: str | None, max_concurrent: int) -> WorkloadRecord:
        """Create or update (by name) a workload; returns the stored snapshot."""

    @abstractmethod
    def list_workloads(self) -> list[WorkloadRecord]:
        """All workloads ordered by name."""

    @abstractmethod
    def get_workload(self, name_or_id: str | int) -> WorkloadRecord:
        """One workload; KeyError naming it when absent."""

    # campaigns --------------------------------------------------------------
    @abstractmethod
    def create_campaign(self, **fields: Any) -> CampaignRecord:
        """Insert a campaign in state ``init`` (fields as in :class:`CampaignRecord`, minus ids and times)."""

    @abstractmethod
    def get_campaign(self, campaign_id: int) -> CampaignRecord:
        """One campaign; KeyError naming it when absent."""

    @abstractmethod
    def list_campaigns(self, states: Sequence[str] | None = None) -> list[CampaignRecord]:
        """Campaigns (optionally only in ``states``), newest first."""

    @abstractmethod
    def update_campaign(self, campaign_id: int, **fields: Any) -> CampaignRecord:
        """Set fields (state, scope, doctor, result, delivered_speedup, error) and log a state change event."""

    # trials -----------------------------------------------------------------
    @abstractmethod
    def add_trial_intent(self, campaign_id: int, trial_key: str, stage: str, config: dict[str, Any],
                         patches: list[str], signature: str, executor: str, outdir: str, gpus: int,
                         partition: str | None, group_key: str | None = None,
                         asked_after: int | None = None) -> TrialRecord:
        """Record the intent to launch (status ``intent``) with the next sequence number of the campaign.

        ``asked_after``: for a search trial, how many search trials the controller had been told when it proposed
        this one (:attr:`TrialRecord.asked_after`; the replay needs it, see ``searchglue.rebuild_controller``)."""

    @abstractmethod
    def mark_submitted(self, trial_id: int, job_id: str, submit_time: float) -> TrialRecord:
        """Record the executor's job id (status ``submitted``)."""

    @abstractmethod
    def mark_resubmitted(self, trial_id: int, job_id: str, submit_time: float, reason: str) -> TrialRecord:
        """A requeue (preemption, node failure): new job id, attempt + 1, an event with ``reason``."""

    @abstractmethod
    def mark_finished(self, trial_id: int, outcome: str, reason: str, start_time: float | None,
                      end_time: float | None) -> TrialRecord:
        """The executor reports the job finished (status ``finished``); ingestion follows."""

    @abstractmethod
    def ingest(self, trial_id: int, ingest: Ingest) -> bool:
        """Write receipt, verdicts, observation, cost and outcome atomically (status ``ingested``).

        Returns False (and writes nothing) when the trial was already ingested."""

    @abstractmethod
    def get_trial(self, trial_id: int) -> TrialRecord:
        """One trial; KeyError when absent."""

    @abstractmethod
    def list_trials(self, campaign_id: int, statuses: Sequence[str] | None = None,
                    stages: Sequence[str] | None = None) -> list[TrialRecord]:
        """A campaign's trials in sequence order, optionally filtered."""

    @abstractmethod
    def live_trials(self, campaign_ids: Sequence[int] | None = None) -> list[TrialRecord]:
        """Trials in status ``intent`` or ``submitted`` (uses the status index)."""

    @abstractmethod
    def observations(self, campaign_id: int) -> dict[int, ObservationRecord]:
        """Observations of a campaign keyed by trial id."""

    @abstractmethod
    def verdicts(self, trial_id: int) -> list[VerdictItem]:
        """The stored invariant results of one trial."""

    @abstractmethod
    def receipt_raw(self, trial_id: int) -> bytes | None:
        """The stored receipt bytes of a trial (None when it produced none)."""

    @abstractmethod
    def list_receipts(self, campaign_id: int) -> list[StoredReceipt]:
        """Every stored receipt of a campaign with its references and judge spec (for re-judging)."""

    # events, costs, finance -------------------------------------------------
    @abstractmethod
    def add_event(self, kind: str, payload: dict[str, Any] | None = None, campaign_id: int | None = None,
                  trial_id: int | None = None) -> None:
        """Append one event."""

    @abstractmethod
    def events(self, campaign_id: int, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` events of a campaign, oldest first."""

    @abstractmethod
    def add_llm_cost(self, campaign_id: int, stage: str, llm_tokens: int) -> None:
        """Record LLM tokens spent by a proposer (a cost row without a trial)."""

    @abstractmethod
    def add_proposer_request(self, campaign_id: int, *, stage: str, proposer: str, kind: str, request: str,
                             model: str, tokens_in: int, tokens_out: int, usd: float | None, wall_s: float,
                             outcome: str, reason: str, prompt_digest: str, n_priors: int = 0,
                             n_patches: int = 0, scope: dict[str, Any] | None = None) -> ProposerRequestRecord:
        """Append one proposer-ledger row (and, when tokens were spent, a cost row with ``llm_tokens`` at
        ``stage``) in one transaction.  ``reason`` is cut to one line of at most 500 characters.  ValueError
        (one line) for an outcome other than ok/failed or a negative count; StoreError for an unknown campaign.

        ``scope``: when given, the campaign's scope record is replaced by it in the same transaction, so an answer
        that was paid for is never recorded without what it brought (and never brought without its ledger row)."""

    @abstractmethod
    def proposer_requests(self, campaign_id: int) -> list[ProposerRequestRecord]:
        """The proposer-ledger rows of one campaign, oldest first."""

    @abstractmethod
    def cost_by_stage(self, campaign_id: int) -> list[dict[str, Any]]:
        """GPU-hours per stage and failure class for one campaign."""

    @abstractmethod
    def finops(self, view: str) -> list[dict[str, Any]]:
        """Rows of one finance view (``failed``, ``campaign_cost``, ``cost_per_pct``, ``llm_cost``,
        ``proposer_cost``)."""

    # experience bank --------------------------------------------------------
    @abstractmethod
    def add_experience(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append verified experience rows (knob, value, workload_class, gpu, log_speedup, mem_delta_gib)."""

    @abstractmethod
    def experience(self, workload_class: str | None = None, gpu: str | None = None) -> list[dict[str, Any]]:
        """Experience rows, optionally filtered."""

    # experience protocol (migration 0005; records in infrarsi.controller.experience.records) ------------------
    # Contract: every write is idempotent on a unique key (environment digest; observation (campaign, trial);
    # effect (campaign, trial, mechanism, value)): writing a record again, or after a crash half-way, never
    # duplicates one and returns how many rows were new.  Reads hand out frozen records; effects carry ``env``.
    @abstractmethod
    def add_environment(self, env: "Environment") -> str:
        """Get-or-create ``env`` by its digest; returns the digest."""

    @abstractmethod
    def environments(self, digests: Sequence[str] | None = None) -> dict[str, "Environment"]:
        """Stored environments by digest (all, or those of ``digests`` that exist)."""

    @abstractmethod
    def add_observations(self, observations: Sequence["Observation"], campaign_id: int | None = None) -> int:
        """Store observations (their environment must exist: ValueError naming the digest otherwise); ``campaign_id``
        links them to a local campaign (row-level security, prune).  Returns the number newly stored."""

    @abstractmethod
    def add_effects(self, effects: Sequence["Effect"], campaign_id: int | None = None) -> int:
        """Store effects; an effect's ``env``, when set, is stored first (get-or-create), otherwise its environment
        digest must exist (ValueError).  All or nothing; returns the number newly stored (duplicates are skipped)."""

    @abstractmethod
    def effects(self, *, mechanisms: Sequence[str] | None = None, framework: str | None = None,
                model_family: str | None = None, gpu_sku: str | None = None, campaign: str | None = None,
                campaign_id: int | None = None, tiers: Sequence[str] | None = None,
                before: Any = None) -> list["Effect"]:
        """Effects matching every given filter (environment fields through the referenced environment), oldest
        first, each with ``env`` filled in."""

    @abstractmethod
    def experience_observations(self, *, campaign: str | None = None, campaign_id: int | None = None,
                                environment: str | None = None) -> list["Observation"]:
        """Experience observations matching every given filter, oldest first."""

    @abstractmethod
    def prune_experience(self, *, before: Any = None, gpu_sku: str | None = None, campaign: str | None = None,
                         campaign_id: int | None = None) -> dict[str, int]:
        """Delete effects and observations matching every given filter (created before ``before``, measured on
        ``gpu_sku``, from ``campaign`` label or local ``campaign_id``), then environments nothing references.
        ValueError without any filter.  Returns counts {effects, observations, environments}."""

    # coordination -----------------------------------------------------------
    @abstractmethod
    def lease(self, name: str = "daemon", holder: str | None = None, lease_s: float = 15.0) -> LeaderLease:
        """A lease handle for ``name`` (nothing is taken until :meth:`LeaderLease.acquire`)."""

    @abstractmethod
    def lease_info(self, name: str = "daemon") -> LeaseRecord | None:
        """The lease row as stored (None when never taken)."""

    @abstractmethod
    def set_fence(self, lease: LeaderLease | None) -> None:
        """From now on refuse every write transaction unless ``lease`` is current (None: stop checking)."""

    #: the lease :meth:`set_fence` installed (None: writes are not checked)
    _fence: LeaderLease | None = None

    def check_fence(self) -> None:
        """FencedError when a fence is set and its lease is no longer current; a no-op without a fence."""
        fence = self._fence
        if fence is not None:
            fence.check()

    # identities and audit (migration 0004) -------------------------------------
    def identity(self) -> str:
        """Who this store acts as (database role on PostgreSQL, OS user on SQLite)."""
        raise NotImplementedError

    def sees_all(self) -> bool:
        """True when this identity may see and act on every campaign (SQLite; on PostgreSQL a superuser or a
        member of ``infrarsi_admin``/``infrarsi_daemon``)."""
        raise NotImplementedError

    def cancel_campaign(self, campaign_id: int, reason: str | None = None) -> CampaignRecord:
        """The narrow cancel path: set state ``cancelled`` (nothing on a terminal campaign) and log a
        ``campaign.state`` event with this identity as actor.  KeyError when the campaign does not exist *or this
        identity may not see it* (the two are indistinguishable on purpose).  Running jobs are stopped by whoever
        runs the engine (the daemon, or :meth:`CampaignEngine.cancel`)."""
        raise NotImplementedError

    def audit(self, campaign_id: int | None = None, actor: str | None = None, since: Any = None,
              kinds: Sequence[str] | None = None, limit: int = 1000) -> list[AuditEvent]:
        """Events visible to this identity, oldest first (the newest ``limit``), filtered by campaign, actor,
        time (``since``: an aware datetime) and kind."""
        raise NotImplementedError
