"""Verified write-back of a real campaign into the experience bank (issue 13, item 1).

Called at report time, after the artifacts are written (``CampaignEngine.write_report`` ->
:func:`infrarsi.controller.campaign.engine.write_experience`), with what it reads passed in: the store, the
contract, the campaign record, the built result, the search's conflict tuples and the signing key.  It never sees
the engine.  What is written:

- one :class:`~.records.Observation` per reference and search trial (full configuration, canonical mechanism
  values, patches, step time and peak memory when it ran to the end, the outcome, acceptance and first failed
  layer as ``verdicts``, the OOM shortfall, and, when it crashed or was rejected, the minimal conflict tuples of
  the search's failure ledger that the trial contains and the ledger's requirements it breaks (``s`` needs ``r``:
  the trial holds ``s`` without ``r``);
- :class:`~.records.Effect` rows only from verified, noise-gated evidence, by the rules of
  :func:`.evidence.evidence_effects` (the same function the simulated write-back of ``infrarsi bench transfer``
  calls, :mod:`.transfer`): its verified runs are the doctor's reference and the accepted, patch-free search
  trials that ran to the end (a rejected or unaccepted trial never counts); the effects are paired single-knob
  changes beyond the campaign's big-knob gate (tier ``verified-search``), the promoted single-knob candidate
  (``verified-rerun``), and posterior-gated main effects of the campaign's Bayesian time model for settings
  measured only inside bundles (``verified-model``).  Derived knobs (a coupling's ``solve``) never count.

Idempotency: the records are keyed by (campaign label ``name#id``, trial key[, mechanism, value]) and the store
skips keys it has (:meth:`infrarsi.controller.store.base.Store.add_effects`), so a crash half-way
(``INFRARSI_CRASH_AT=in_writeback`` SIGKILLs between the observations and the effects) or a re-run of ``report``
never duplicates a record.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from infrarsi.controller.experience.environment import canonical_config, knob_mechanisms
from infrarsi.controller.experience.evidence import MIN_GATE, Promoted, Run, evidence_effects, gate_of
from infrarsi.controller.experience.mechanisms import value_key
from infrarsi.controller.experience.records import Effect, Environment, Observation
from infrarsi.controller.experience.retrieval import target_knobs
from infrarsi.controller.faults import crash_point
from infrarsi.controller.store.stage_records import doctor_or_none


def campaign_label(campaign: Any) -> str:
    """The source label of a local campaign in the bank: ``name#id``."""
    return f"{campaign.name}#{campaign.id}"


def campaign_records(contract: Any, campaign: Any, env: Environment, trials: Sequence[Any],
                     observations: Mapping[int, Any], result: Mapping[str, Any],
                     banned: Iterable[Iterable[tuple[str, Any]]] = (),
                     requirements: Iterable[tuple[tuple[str, Any], tuple[str, Any]]] = (),
                     ) -> tuple[list[Observation], list[Effect]]:
    """The observations and effects of one campaign (pure: no store).  ``trials`` are TrialRecords,
    ``observations`` ObservationRecords by trial id, ``result`` the report's result dict (``reference`` block,
    ``promoted``), ``banned`` the failure ledger's minimal conflict tuples of (knob, value), ``requirements`` its
    ``((knob, value), (partner knob, partner value))`` requirements."""
    from infrarsi.controller.contract.checks import complete_config

    label = campaign_label(campaign)
    digest = env.digest()
    mech = knob_mechanisms(contract)
    derived = set(contract.derived_knobs)
    ref_cfg = complete_config(contract, dict(contract.reference_config)) or dict(contract.reference_config)
    reference = {k.name: k.reference for k in contract.knobs}
    gate, sigma = gate_of(result.get("reference") or {})
    banned_t = [tuple(t) for t in banned]
    reqs = [(tuple(a), tuple(b)) for a, b in requirements]

    def canon(name: str, value: Any) -> tuple[str | None, str]:
        m, cmap = mech.get(name, (None, {}))
        return m, cmap.get(value_key(value), value_key(value))

    obs_out: list[Observation] = []
    ok: list[tuple[dict[str, Any], float, str, float | None]] = []
    t0 = (result.get("reference") or {}).get("step_time_s")
    if isinstance(t0, (int, float)) and t0 > 0:
        ok.append((ref_cfg, float(t0), "reference", (result.get("reference") or {}).get("peak_mem_gib")))
    for t in trials:
        if t.stage not in ("reference", "search"):
            continue
        o = observations.get(t.id)
        full = complete_config(contract, dict(contract.reference_config) | dict(t.config)) or dict(t.config)
        ran = t.outcome == "ok" and o is not None and o.step_time_s
        conf = []
        need: tuple = ()
        if t.outcome in ("crash", "rejected"):
            sets = {(n, value_key(v)) for n, v in full.items()}
            for tup in banned_t:
                if tup and all((n, value_key(v)) in sets for n, v in tup):
                    pairs = tuple(sorted(canon(n, v) for n, v in tup if canon(n, v)[0]))
                    if pairs:
                        conf.append(tuple((str(a), b) for a, b in pairs))
            need = broken_requirements(reqs, sets, canon)
        obs_out.append(Observation(
            environment=digest, campaign=label, trial=t.trial_key, config=full,
            canonical=canonical_config(contract, full), patches=tuple(t.patches),
            step_time_s=float(o.step_time_s) if ran else None,
            peak_mem_gib=o.peak_mem_gib if o is not None else None,
            verdicts={"outcome": t.outcome or t.status, "accepted": bool(o and o.accepted),
                      **({"first_failed_layer": o.first_failed_layer} if o and o.first_failed_layer else {})},
            oom_shortfall_gib=o.oom_shortfall_gib if o is not None else None, conflicts=tuple(conf),
            requirements=need))
        if t.stage == "search" and ran and o.accepted and not t.patches:
            ok.append((full, float(o.step_time_s), t.trial_key, o.peak_mem_gib))

    runs = [Run(trial=key, config={n: cfg[n] for n in reference if n in cfg}, step_time_s=t, peak_mem_gib=mem)
            for cfg, t, key, mem in ok]
    promoted = result.get("promoted")
    speedup = result.get("delivered_speedup")
    promo = None
    if promoted and not promoted.get("patches") and isinstance(speedup, (int, float)) and speedup > 0:
        changed = [n for n in (promoted.get("changed") or {}) if n not in derived and n in reference]
        if len(changed) == 1:
            promo = Promoted(changed[0], promoted["config"][changed[0]], float(speedup))
    effects = evidence_effects(target_knobs(contract.knobs), runs, env, label, gate, sigma, promo, derived)
    return obs_out, effects


def broken_requirements(requirements: Iterable[tuple[tuple[str, Any], tuple[str, Any]]],
                        settings: set[tuple[str, str]],
                        canon: Callable[[str, Any], tuple[str | None, str]]) -> tuple[tuple[tuple[str, str],
                                                                                       tuple[str, str]], ...]:
    """The requirements ``((knob, value), (partner knob, partner value))`` a failed run breaks, as
    ``((mechanism, canonical value), (partner mechanism, partner canonical value))``: it holds the setting
    (``settings``: (knob, :func:`value_key`) pairs of its whole configuration) without the partner.  ``canon`` maps
    a knob setting onto its mechanism (None: the knob names none, and the requirement is not written)."""
    out = set()
    for (sk, sv), (rk, rv) in requirements:
        if (sk, value_key(sv)) in settings and (rk, value_key(rv)) not in settings:
            a, b = canon(sk, sv), canon(rk, rv)
            if a[0] and b[0]:
                out.add(((str(a[0]), str(a[1])), (str(b[0]), str(b[1]))))
    return tuple(sorted(out))


def write_back(store: Any, campaign_id: int | None, env: Environment, observations: Sequence[Observation],
               effects: Sequence[Effect]) -> dict[str, int]:
    """Store one campaign's records idempotently; returns how many observations and effects were new."""
    store.add_environment(env)
    n_obs = store.add_observations(observations, campaign_id=campaign_id)
    crash_point("in_writeback")
    n_eff = store.add_effects(effects, campaign_id=campaign_id)
    return {"observations": n_obs, "effects": n_eff}


def write_campaign_experience(store: Any, contract: Any, campaign: Any, result: Mapping[str, Any], *,
                              conflicts: Iterable[Any] = (), requirements: Iterable[Any] = (),
                              master_key: Callable[[], bytes] | None = None) -> dict[str, int]:
    """Write back a finished ``campaign`` (the report-time hook): environment from ``contract`` and the reference
    receipt (read with ``master_key()``; without it the software versions are unknown), records from ``store``'s
    trials and observations, ``conflicts`` and ``requirements`` from the search's failure ledger
    (:func:`search_failures`)."""
    from infrarsi.controller.experience.environment import campaign_environment

    doctor = doctor_or_none(campaign)
    trials = store.list_trials(campaign.id)
    obs = store.observations(campaign.id)
    env = campaign_environment(contract, doctor.header_extra if doctor else None,
                               _reference_versions(store, master_key, trials))
    o, e = campaign_records(contract, campaign, env, trials, obs, result, list(conflicts), list(requirements))
    return write_back(store, campaign.id, env, o, e)


def search_failures(rebuild: Callable[[], Any] | None) -> tuple[list, list]:
    """The failure ledger of the search ``rebuild()`` returns: its minimal conflict tuples (``banned``) and its
    requirements (``((knob, value), (partner knob, partner value))``); ``([], [])`` when there is no search or it
    cannot be rebuilt: both are optional and must never stop a write-back."""
    if rebuild is None:
        return [], []
    try:
        ledger = rebuild().ledger
        return list(ledger.banned), list(ledger.requirements)
    except Exception:  # noqa: BLE001 - a model that cannot be rebuilt must not stop the write-back
        return [], []


def search_conflicts(rebuild: Callable[[], Any] | None) -> list:
    """The minimal conflict tuples alone (:func:`search_failures`)."""
    return search_failures(rebuild)[0]


def _reference_versions(store: Any, master_key: Callable[[], bytes] | None,
                        trials: Sequence[Any]) -> dict[str, Any] | None:
    """The software versions of the first ok reference receipt, None when unavailable."""
    if master_key is None:
        return None
    try:
        from infrarsi.verifier.receipt import load_receipt

        for t in trials:
            if t.stage == "reference" and t.outcome == "ok":
                raw = store.receipt_raw(t.id)
                if raw:
                    r = load_receipt(raw, master_key(), t.trial_key)
                    v = (r.header or {}).get("versions")
                    return dict(v) if isinstance(v, dict) else None
    except Exception:  # noqa: BLE001 - best effort
        return None
    return None


__all__ = ["MIN_GATE", "campaign_label", "gate_of", "campaign_records", "write_back", "write_campaign_experience",
           "search_conflicts", "search_failures", "broken_requirements"]
