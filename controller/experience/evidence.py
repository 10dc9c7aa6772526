"""The evidence rules of write-back: which effects a finished campaign may write (issue 13, item 1).

One pure function, :func:`evidence_effects`, used by the real campaign's write-back (:mod:`.writeback`, at report
time) and by the simulated one of ``infrarsi bench transfer`` (:mod:`.transfer`), so both follow the same rules.
Its input is the campaign's **verified runs** only: the doctor's reference and every accepted, patch-free search
trial that ran to the end (:class:`Run`); a crashed, rejected or unaccepted trial (a cheat the verifier caught) is
never a run and never becomes evidence.

Effects, strongest tier first:

1. ``verified-rerun``: the promoted candidate, when it is a single-knob change without patches whose delivered
   speedup (its back-to-back re-runs cleared the promotion margin) is beyond the gate.
2. ``verified-search`` (*paired*): two runs whose searched configurations differ in exactly one knob, one side at
   that knob's reference value, with ``|ln(t_a / t_b)|`` at least the campaign's big-knob gate (2 x sigma_pair, at
   least :data:`MIN_GATE`); the other non-reference settings are the effect's conditioning.
3. ``verified-model`` (*posterior-gated*): every setting gets the main effect of the campaign's Bayesian linear
   time model
   (:class:`infrarsi.surrogate.time_model.BayesLinearTimeModel`, the search's model) refitted on the verified
   runs alone, ``y = ln(t_ref / t)`` over one indicator per non-reference setting, with a neutral prior N(0,
   :data:`MODEL_PRIOR_SD`^2) (nothing the contract or a proposer claimed can echo back as experience) and a noise
   variance of sigma_pair^2 (at least :data:`MODEL_NOISE_FLOOR`^2), raised to the residual variance of the fit when
   the additive model fits worse than the noise (an interaction the model lacks widens every posterior instead
   of hiding in a main effect).  Written only when the posterior clears the same noise gate as a pair:
   ``|mean| >= gate`` and ``|mean| >= MODEL_Z x sd`` (at least as strict as one paired measurement, whose SD is
   about sigma_pair = gate / 2), and the setting ran in at least :data:`MODEL_MIN_RUNS` verified runs.  Settings
   always switched on together (never measured apart) have wide, correlated posteriors and are not written.  The
   record: trial ``model``, no conditioning (an additive main effect against the reference state), noise floor
   ``max(sigma_pair, posterior sd)``, the memory delta from the same model on peak memory when its posterior SD
   is at most :data:`MODEL_MEM_SD_MAX` GiB (that model's noise is raised to its residual variance the same way, so
   a memory interaction the additive model lacks, e.g. activations divided by the TP degree, withholds the delta).
   This is how settings measured only inside bundles reach the bank; for a setting that also has paired evidence
   it is a second estimate from the same runs, and retrieval uses one or the other per source campaign, never
   both (:func:`.retrieval.setting_priors`).

Derived knobs (a coupling's ``solve``) are never a difference nor a feature.  The output is deterministic in the
runs' order, and keyed (campaign, trial, mechanism, value), so a re-run writes the same keys (the store skips
them: idempotent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Collection, Mapping, Sequence

import numpy as np

from infrarsi.controller.experience.mechanisms import value_key
from infrarsi.controller.experience.records import Effect, Environment

#: the smallest effect ever written, whatever the noise (log-speedup)
MIN_GATE = 0.02
#: prior SD of every setting's main effect in the write-back model (the search's default prior SD)
MODEL_PRIOR_SD = 0.10
#: floor of the per-run noise SD assumed by the write-back model (log-speedup)
MODEL_NOISE_FLOOR = 0.01
#: a model effect's posterior mean must be at least this many posterior SDs from zero
MODEL_Z = 2.0
#: verified runs a setting must have run in before its model effect is written
MODEL_MIN_RUNS = 2
#: memory: prior SD (GiB) of a setting's memory delta and the largest posterior SD still written
MODEL_MEM_PRIOR_SD = 50.0
MODEL_MEM_NOISE_SD = 1.0
MODEL_MEM_SD_MAX = 2.0
#: the trial key of model effects
MODEL_TRIAL = "model"


@dataclass(frozen=True)
class Run:
    """One verified run: the reference (``trial="reference"``) or an accepted, patch-free trial that ran to the
    end.  ``config`` holds every searched knob's value (missing knobs are at their reference)."""

    trial: str
    config: Mapping[str, Any]
    step_time_s: float
    peak_mem_gib: float | None = None


@dataclass(frozen=True)
class Promoted:
    """The promoted candidate when it is a single-knob, patch-free change: that knob, its value and the delivered
    speedup (re-runs against the reference)."""

    knob: str
    value: Any
    speedup: float


def gate_of(result_reference: Mapping[str, Any]) -> tuple[float, float | None]:
    """(gate, sigma_pair) from a result's ``reference`` block: the big-knob gate, else 2 x sigma_pair, at least
    :data:`MIN_GATE`."""
    sigma = result_reference.get("sigma_pair")
    sigma = float(sigma) if isinstance(sigma, (int, float)) else None
    gate = result_reference.get("big_knob_gate")
    g = float(gate) if isinstance(gate, (int, float)) else 2.0 * (sigma or 0.0)
    return max(MIN_GATE, g), sigma


def _canon(knob: Any, value: Any) -> str:
    return knob.canonical.get(value_key(value), value_key(value))


def _conditioning(knobs: Sequence[Any], config: Mapping[str, Any], env: Environment, skip: str) -> dict[str, str]:
    out = {}
    for k in knobs:
        if not k.mechanism or k.mechanism == skip or k.name not in config:
            continue
        v = _canon(k, config[k.name])
        if v != env.reference_state.get(k.mechanism):
            out[k.mechanism] = v
    return out


def _value(config: Mapping[str, Any], knob: Any) -> Any:
    return config.get(knob.name, knob.reference)


def evidence_effects(knobs: Sequence[Any], runs: Sequence[Run], env: Environment, label: str, gate: float,
                     sigma: float | None, promoted: Promoted | None = None,
                     derived: Collection[str] = ()) -> list[Effect]:
    """Every effect one campaign may write (see the module docstring).

    ``knobs``: the contract's or landscape's knobs as :class:`~.retrieval.TargetKnob` (name, values, reference,
    mechanism, klass, canonical map); ``runs``: the verified runs, the reference first when known; ``gate`` and
    ``sigma`` the campaign's big-knob gate and sigma_pair; ``derived``: knob names never counted.
    """
    gate = max(MIN_GATE, float(gate))
    digest = env.digest()
    searched = [k for k in knobs if k.name not in set(derived) and k.mechanism]
    effects: dict[tuple[str, str, str, str], Effect] = {}
    if promoted is not None and promoted.speedup > 0 and abs(math.log(promoted.speedup)) >= gate:
        k = next((k for k in searched if k.name == promoted.knob), None)
        if k is not None and promoted.value != k.reference:
            eff = Effect(environment=digest, mechanism=k.mechanism, value=_canon(k, promoted.value), klass=k.klass,
                         log_speedup=math.log(float(promoted.speedup)), noise_floor=sigma, conditioning={},
                         tier="verified-rerun", campaign=label, trial="promotion", knob=k.name,
                         raw_value=value_key(promoted.value), env=env)
            effects.setdefault(eff.key, eff)
    for a in runs:
        for b in runs:
            diff = [k for k in searched if _value(a.config, k) != _value(b.config, k)]
            if len(diff) != 1:
                continue
            k = diff[0]
            va, vb = _value(a.config, k), _value(b.config, k)
            if va != k.reference:
                continue
            e = math.log(a.step_time_s / b.step_time_s)
            if abs(e) < gate:
                continue  # noise-gated: only effects beyond the campaign's gate are evidence
            mem = b.peak_mem_gib - a.peak_mem_gib if a.peak_mem_gib is not None and b.peak_mem_gib is not None \
                else None
            eff = Effect(environment=digest, mechanism=k.mechanism, value=_canon(k, vb), klass=k.klass,
                         log_speedup=e, noise_floor=sigma,
                         conditioning=_conditioning(searched, a.config, env, k.mechanism), tier="verified-search",
                         campaign=label, trial=b.trial, knob=k.name, raw_value=value_key(vb), mem_delta_gib=mem,
                         env=env)
            effects.setdefault(eff.key, eff)
    for eff in model_effects(searched, runs, env, label, gate, sigma):
        effects.setdefault(eff.key, eff)
    return list(effects.values())


def _features(knobs: Sequence[Any], runs: Sequence[Run]) -> tuple[list[tuple[Any, Any]], np.ndarray]:
    settings = [(k, v) for k in knobs for v in k.values if v != k.reference]
    X = np.array([[1.0 if _value(r.config, k) == v else 0.0 for k, v in settings] for r in runs], dtype=float)
    return settings, X.reshape(len(runs), len(settings))


def _fit(X: np.ndarray, y: np.ndarray, prior_sd: float, noise_var: float) -> Any:
    """The Bayesian linear model N(0, prior_sd^2) per column on (X, y), its noise variance raised to the residual
    variance when the additive fit is worse than ``noise_var`` (with at least two residual degrees of freedom)."""
    from infrarsi.surrogate.time_model import BayesLinearTimeModel

    d = X.shape[1]

    def fit(nv: float) -> Any:
        return BayesLinearTimeModel(np.zeros(d), np.full(d, prior_sd ** 2), nv, sigma_min=min(prior_sd, 0.01)
                                    ).fit(X, y)

    model = fit(noise_var)
    dof = len(y) - int((X.sum(axis=0) > 0).sum())
    if dof >= 2:
        resid = y - X @ np.asarray(model.coef_mean)
        s2 = float(resid @ resid) / dof
        if s2 > noise_var:
            model = fit(s2)
    return model


def model_effects(knobs: Sequence[Any], runs: Sequence[Run], env: Environment, label: str, gate: float,
                  sigma: float | None) -> list[Effect]:
    """The posterior-gated main effects of the write-back model (tier ``verified-model``; see the module
    docstring), for every setting that clears the gate, in knob and value order.  Needs the reference run (its
    step time is ``t_ref``); returns [] without it."""
    ref = next((r for r in runs if r.trial == "reference"), None)
    if ref is None or not ref.step_time_s or ref.step_time_s <= 0 or len(runs) < 2:
        return []
    settings, X = _features(knobs, runs)
    if not settings:
        return []
    y = np.array([math.log(ref.step_time_s / r.step_time_s) for r in runs])
    noise = max(float(sigma or 0.0), MODEL_NOISE_FLOOR) ** 2
    model = _fit(X, y, MODEL_PRIOR_SD, noise)
    mean, sd = np.asarray(model.coef_mean), np.asarray(model.coef_sd)
    mem_mean = mem_sd = None
    rows = [i for i, r in enumerate(runs) if r.peak_mem_gib is not None]
    if ref.peak_mem_gib is not None and len(rows) >= 2:
        ym = np.array([runs[i].peak_mem_gib - ref.peak_mem_gib for i in rows], dtype=float)
        mm = _fit(X[rows], ym, MODEL_MEM_PRIOR_SD, MODEL_MEM_NOISE_SD ** 2)
        mem_mean, mem_sd = np.asarray(mm.coef_mean), np.asarray(mm.coef_sd)
    counts = X.sum(axis=0)
    digest = env.digest()
    out = []
    for i, (k, v) in enumerate(settings):
        m, s = float(mean[i]), float(sd[i])
        if counts[i] < MODEL_MIN_RUNS or abs(m) < gate or abs(m) < MODEL_Z * s:
            continue
        mem = float(mem_mean[i]) if mem_mean is not None and float(mem_sd[i]) <= MODEL_MEM_SD_MAX else None
        out.append(Effect(environment=digest, mechanism=k.mechanism, value=_canon(k, v), klass=k.klass,
                          log_speedup=m, noise_floor=max(float(sigma or 0.0), s), conditioning={},
                          tier="verified-model", campaign=label, trial=MODEL_TRIAL, knob=k.name,
                          raw_value=value_key(v), mem_delta_gib=mem, env=env))
    return out


__all__ = ["MIN_GATE", "MODEL_PRIOR_SD", "MODEL_NOISE_FLOOR", "MODEL_Z", "MODEL_MIN_RUNS", "MODEL_MEM_SD_MAX",
           "MODEL_TRIAL", "Run", "Promoted", "gate_of", "evidence_effects", "model_effects"]
