"""Thin glue between the search and ``surrogate/``: builds priors from the
space, refits the Bayesian time model and the censored memory model from the
trial history, and answers batched predictions.

Time target: ``y = ln(T0 / T)`` over :class:`FeatureMap` indicators (no
intercept).  Memory target: peak GiB over the singles with a fitted intercept (the
reference's peak memory), as an evidence-weighted average of an additive and
a multiplicative form (:class:`MemoryModel`).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.stats import norm

from infrarsi.controller.search.features import FeatureMap
from infrarsi.controller.search.space import PATCH, Candidate, Outcome, SearchSpace
from infrarsi.surrogate._linalg import chol_lower
from infrarsi.surrogate.time_model import BayesLinearTimeModel

#: decimals every model output is rounded to (see :func:`stable`)
DECIMALS = 9


def stable(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to :data:`DECIMALS` decimals.

    The fits go through BLAS/LAPACK, whose kernels (chosen per CPU: AVX2 on one machine, AVX-512 on the
    next) round differently in the last bits.  The search compares and sorts these outputs; where two
    candidates tie in exact arithmetic (two switches with equal priors, say) those last bits, not the
    tie-breaks written for the purpose, would decide, and one seeded benchmark would follow different
    trial sequences on different machines.  Rounded far above that noise and far below any effect the
    search can resolve, every decision is the same on every CPU."""
    return np.round(np.asarray(x, dtype=float), DECIMALS)


class TimeModel:
    """Refits :class:`BayesLinearTimeModel` on all ok trials (features may grow with enabling pairs)."""

    def __init__(self, fmap: FeatureMap, prior_mu: np.ndarray, prior_sd: np.ndarray, noise_var: float,
                 pair_prior_sd: float, sigma_min: float, unsigned: Mapping[int, float] | None = None,
                 chains: Sequence[Sequence[int]] = (), chain_rho: float = 0.7, chain_when: str = "always"):
        """``unsigned``: feature index -> the |log-speedup| that setting was measured at elsewhere, its sign
        unknown here (``SearchController.sign_unknown``).  Empirical prior revision never makes such a setting
        surer than that before this campaign measures it (see :meth:`refit`).

        ``chains``: per side of an ordered knob's reference, its settings' feature indices ordered outward
        (TP2, TP4).  Along a chain each setting's effect is the previous one's plus an increment with prior SD
        ``chain_rho`` x its own prior SD, so a measured TP2 moves the estimate of TP4 (the posterior is solved
        over the increments; every output of this class is per setting, as without chains).  ``chain_when``:
        ``"always"``, or ``"loss"``: a setting is chained to the previous one only while that one's estimate
        (without chains) is a loss: past a level that hurts, the next one out is expected to hurt too
        (unimodal), while a level that helps says little about the next."""
        self.chain_rho = float(chain_rho)
        self.chain_when = chain_when
        self._all_links = [(prev, i) for c in chains for prev, i in zip(c[:-1], c[1:])]
        self.links: list[tuple[int, int]] = list(self._all_links) if chain_when == "always" else []
        self.fmap = fmap
        self.unsigned = dict(unsigned or {})
        self.prior_mu = prior_mu
        self.prior_sd = prior_sd
        self.noise_var = noise_var
        self.pair_prior_sd = pair_prior_sd
        self.sigma_min = sigma_min
        self.model: BayesLinearTimeModel | None = None
        self.revise = False  # set by the controller once empirical prior revision is triggered
        self.revision = None
        self.refit(np.zeros((0, fmap.dim)), np.zeros(0))

    def _priors(self) -> tuple[np.ndarray, np.ndarray]:
        extra = self.fmap.dim - len(self.prior_mu)
        mu = np.concatenate([self.prior_mu, np.zeros(extra)])
        sd = np.concatenate([self.prior_sd, np.full(extra, self.pair_prior_sd)])
        for prev, i in self.links:  # increments along an ordered axis (see __init__)
            mu[i] = self.prior_mu[i] - self.prior_mu[prev]
            sd[i] = self.chain_rho * self.prior_sd[i]
        return mu, sd * sd

    def _lift(self, d: int) -> np.ndarray | None:
        """``L`` (d x d) with per-setting coefficients = ``L`` @ increments; None without links."""
        if not self.links:
            return None
        L = np.eye(d)
        for prev, i in self.links:  # outward order: the previous row is final
            L[i] += L[prev]
        return L

    def _rows(self, X: np.ndarray) -> np.ndarray:
        L = self._lift(X.shape[1])
        return X if L is None else X @ L

    def refit(self, X: np.ndarray, y: np.ndarray) -> None:
        if self.chain_when == "loss" and self._all_links:  # links belong to the fit: saved with the model
            self.links = []
            mu, var = self._priors()
            m = BayesLinearTimeModel(mu, var, self.noise_var, sigma_min=self.sigma_min)
            mean = np.asarray((m.fit(X, y) if len(y) else m).coef_mean)
            self.links = [(prev, i) for prev, i in self._all_links if mean[prev] < 0.0]
        mu, var = self._priors()
        m = BayesLinearTimeModel(mu, var, self.noise_var, sigma_min=self.sigma_min)
        self.model = m.fit(self._rows(X), y) if len(y) else m
        if self.revise and len(y):
            self.revision = m.revise_prior(min_informed=3)  # empirical-Bayes revision, re-solved in place
            self._keep_unsigned(m, X)

    def _keep_unsigned(self, m: BayesLinearTimeModel, X: np.ndarray) -> None:
        """Undo the revision's certainty about a sign-unknown setting this campaign has not measured.

        The revision moves every prior level onto a calibration line fitted to the measured settings and sets
        its spread to their residual spread.  A setting with no stated prior sits at the line's intercept with
        that spread: after a few trials of other levers, often a confident small loss (-0.05 +- 0.03), so the
        search stops proposing a lever another GPU measured at |0.05| or more, whose sign is the one thing it
        does not know.  Until a trial holds it, a revision that made such a setting surer than that magnitude
        is undone for it: it keeps its stated prior level, with the magnitude as its spread."""
        if not self.unsigned or self.revision is None or not self.revision.revised:
            return
        held = X[:, : len(self.prior_mu)].any(axis=0) if len(X) else np.zeros(len(self.prior_mu), dtype=bool)
        mean, sd = np.array(self.revision.mean, dtype=float), np.array(self.revision.sd, dtype=float)
        changed = False
        for i, g in self.unsigned.items():
            if i < len(self.prior_mu) and not held[i] and sd[i] < g:
                mean[i], sd[i], changed = self.prior_mu[i], g, True
        if changed:
            m.set_prior(mean, sd * sd)

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        assert self.model is not None
        mean, var = self.model.predict(self._rows(X))
        return stable(mean), stable(np.sqrt(np.maximum(var, 0.0)))

    def _coef_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and covariance of the per-setting coefficients."""
        assert self.model is not None
        mean, cov = np.asarray(self.model.coef_mean), np.asarray(self.model.coef_cov)
        L = self._lift(len(mean))
        if L is None:
            return mean, cov
        return L @ mean, L @ cov @ L.T

    def coef(self) -> tuple[np.ndarray, np.ndarray]:
        assert self.model is not None
        if not self.links:
            return stable(self.model.coef_mean), stable(self.model.coef_sd)
        mean, cov = self._coef_moments()
        return stable(mean), stable(np.sqrt(np.maximum(np.diag(cov), 0.0)))

    def coef_sample(self, rng: np.random.Generator, optimistic: np.ndarray | None = None) -> np.ndarray:
        """One draw of the coefficients from the posterior (for Thompson sampling); deterministic in ``rng``.

        Where the boolean mask ``optimistic`` is set, the draw's deviation from the posterior mean is floored at
        zero (optimistic Thompson sampling: the draw never rates such a coefficient below its mean)."""
        mean, cov = self._coef_moments()
        chol = chol_lower(cov)  # jittered only if round-off demands it
        dev = chol @ rng.standard_normal(len(mean))
        if optimistic is not None:
            dev = np.where(optimistic, np.maximum(dev, 0.0), dev)
        return stable(mean + dev)


class MemoryModel:
    """Censored peak-memory model over the single indicators (intercept = reference peak); falls back to the
    priors before any data.  ``forms="additive"`` (the default): each setting adds GiB.  ``forms="mixture"``: a
    Bayesian average of that form and a multiplicative one (each setting scales the peak; the Tobit model of
    ln GiB), weighted by their Laplace evidence.  Not the default: over the benchmark it was a wash (session 22
    in ``bench/RESULTS.md``: 47 against 46 search cells hold, 11 against 12 transfer directions).

    Why both: weights, gradients and optimizer state add; activation memory multiplies (micro-batch x recompute
    share / (TP x CP) x the attention kernel's factor).  Under the additive form alone a start of TP2 + no
    recompute + flash is predicted at the sum of its settings' deltas at the reference, about twice what it
    uses; under the multiplicative form alone, settings that add a fixed buffer are overstated beside TP.  The
    data choose: each form's evidence is a density of the same peaks (GiB), so their ratio is a Bayes factor,
    and one trial that combines two memory levers usually decides it.

    The search runs the additive form with ``activation_pairs`` (its tuning key ``memory_activation_pairs``):
    the activation mechanisms' interactions start at the product form's value and the data move them, which
    keeps savers such as bf16 additive.  Over 100 seeds it made the search slightly faster (session 24 in
    ``bench/RESULTS.md``)."""

    def __init__(self, space: SearchSpace, fmap: FeatureMap, capacity_gib: float, ref_mem_gib: float | None,
                 mem_priors: Mapping[tuple[str, Any], tuple[float, float]] | None = None, forms: str = "additive",
                 activation_pairs: bool = False):
        """``mem_priors``: (knob, value) -> (GiB delta, SD) from retrieved experience; they replace the knob's
        stated ``mem_prior_gib`` (the SD never below 3% of capacity or half the delta).  Each GiB prior (a
        delta at the reference) is carried to the log form as the ratio it implies at the reference peak.
        ``activation_pairs``: start with the memory interactions among settings of activation mechanisms
        (:data:`ACTIVATION_MECHANISMS`, by the knob's ``mechanism`` or its name's catalog alias), whose memory
        multiplies; their priors are those of :meth:`_priors`.

        Raises: ValueError for an unknown ``forms``."""
        if forms not in MEMORY_FORMS:
            raise ValueError(f"memory_forms: must be one of {MEMORY_FORMS}, got {forms!r}")
        self.forms = forms
        self.fmap = fmap
        self.capacity = float(capacity_gib)
        n = len(fmap.singles)
        base = ref_mem_gib if ref_mem_gib is not None else 0.6 * self.capacity
        base_sd = 0.05 * self.capacity if ref_mem_gib is not None else 0.3 * self.capacity
        mu = np.zeros(n + 1)
        sd = np.zeros(n + 1)
        mu[0], sd[0] = base, base_sd
        for i, (name, value) in enumerate(fmap.singles):
            if name == PATCH:
                mu[i + 1], sd[i + 1] = 0.0, 0.03 * self.capacity
            else:
                m = space.knob(name).mem_prior_of(value)
                s = 0.0
                if mem_priors and (name, value) in mem_priors:
                    m, s = mem_priors[(name, value)]
                mu[i + 1], sd[i + 1] = m, max(0.03 * self.capacity, 0.5 * abs(m), s)
        self.prior_mu, self.prior_var = mu, sd * sd
        self.log_prior_mu, self.log_prior_var = _log_prior(mu, sd)
        self.obs_sd = 0.02 * self.capacity
        #: memory interaction features: pairs of single columns (a, b), a < b, admitted by :meth:`maybe_add_pair`
        self.pairs: list[tuple[int, int]] = _activation_pairs(space, fmap) if activation_pairs else []
        self.model = None
        self.log_model = None
        #: posterior weight of the additive form (the prior weight before any data)
        self.w_additive = self._prior_weight()

    def _prior_weight(self) -> float:
        return ADDITIVE_PRIOR_WEIGHT if self.forms == "mixture" else 1.0

    def design(self, X: np.ndarray) -> np.ndarray:
        S = X[:, : len(self.fmap.singles)]
        if not self.pairs:
            return S
        return np.hstack([S] + [(S[:, a] * S[:, b])[:, None] for a, b in self.pairs])

    def _priors(self) -> tuple[np.ndarray, np.ndarray]:
        """The additive form's prior (mean, variance) over intercept, singles and pairs.  A pair's prior is
        centred on the interaction a multiplicative model implies, m_a x m_b / base (two activation spenders
        compound; a spender beside a saver spends less), with an SD of that size or 5% of capacity."""
        if not self.pairs:
            return self.prior_mu, self.prior_var
        mu, var = list(self.prior_mu), list(self.prior_var)
        for a, b in self.pairs:
            m = float(self.prior_mu[a + 1] * self.prior_mu[b + 1] / self.prior_mu[0])
            mu.append(m)
            var.append(max(0.05 * self.capacity, abs(m)) ** 2)
        return np.asarray(mu), np.asarray(var)

    def maybe_add_pair(self, singles: Sequence[int], y: float, kind: str, prev_mean: float, prev_sd: float) -> bool:
        """Admit memory interactions after a tell whose peak the model (before that tell) got far wrong.

        ``singles``: the told configuration's single columns; ``y``, ``kind``: its memory row (see
        :func:`memory_rows`); ``prev_mean``, ``prev_sd``: the prediction for it before it was told.  An exact peak
        more than MEMORY_PAIR_Z predictive SDs (and 5% of capacity) from the prediction, or an OOM whose bound
        is that far above it, admits the pairs among its (up to) three settings with the largest fitted
        |GiB|.  Returns whether a pair was added (the caller refits).  Used under the tuning key ``memory_pairs``
        (off by default: neutral over the benchmark, session 22 in ``bench/RESULTS.md``)."""
        if self.model is None or len(singles) < 2 or kind == "near_cap":
            return False
        tol = max(MEMORY_PAIR_Z * math.sqrt(prev_sd ** 2 + self.obs_sd ** 2), 0.05 * self.capacity)
        gap = y - prev_mean
        if (kind == "exact" and abs(gap) <= tol) or (kind == "oom" and gap <= tol):
            return False
        coef = np.abs(self.model.coef_mean[: len(self.fmap.singles)])
        ranked = sorted(singles, key=lambda j: (-round(float(coef[j]), 6), j))[:3]
        added = False
        for a, b in itertools.combinations(sorted(ranked), 2):
            if (a, b) not in self.pairs:
                self.pairs.append((a, b))
                added = True
        return added

    def refit(self, X: np.ndarray, y: np.ndarray, kind: Sequence[str]) -> None:
        if not len(y):
            self.model = self.log_model = None
            self.w_additive = self._prior_weight()
            return
        from infrarsi.surrogate.memory_model import TobitMemoryModel  # imported lazily: optional until fitted
        D, yv = self.design(X), np.asarray(y, dtype=float)
        pm, pv = self._priors()
        self.model = TobitMemoryModel(self.capacity, prior_mean=pm, prior_var=pv).fit(D, yv, list(kind))
        if self.forms == "additive":
            return
        floor = 1e-3 * self.capacity
        self.log_model = TobitMemoryModel(self.capacity, prior_mean=self.log_prior_mu,
                                          prior_var=self.log_prior_var, log_scale=True).fit(
            D[:, : len(self.fmap.singles)], np.where(np.isfinite(yv), np.maximum(yv, floor), yv), list(kind))
        gap = self.log_model.log_evidence - self.model.log_evidence
        prior_odds = math.log(ADDITIVE_PRIOR_WEIGHT / (1.0 - ADDITIVE_PRIOR_WEIGHT))
        self.w_additive = float(stable(1.0 / (1.0 + math.exp(min(700.0, gap - prior_odds)))))

    def _forms(self, X: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """((mean, sd) GiB of the additive form, (mean, sd) ln GiB of the log form) per row, without noise; the
        log form is all zeros when it has no weight."""
        D = self.design(X)
        Ds = D[:, : len(self.fmap.singles)]  # the log form has no pairs
        add = _prior_predict(*self._priors(), D) if self.model is None else self.model.predict(D)
        if self.w_additive == 1.0:
            zero = np.zeros(D.shape[0])
            return add, (zero, zero)
        if self.log_model is None:
            return add, _prior_predict(self.log_prior_mu, self.log_prior_var, Ds)
        return add, self.log_model.predict(Ds)

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, sd) GiB per row: the moments of the two forms' mixture (the log form at its median, with the
        delta-method SD)."""
        (ma, sa), (ml, sl) = self._forms(X)
        w = self.w_additive
        if w == 1.0:
            return stable(ma), stable(sa)
        gl = np.exp(ml)
        mean = w * ma + (1.0 - w) * gl
        second = w * (sa * sa + ma * ma) + (1.0 - w) * (gl * gl * (1.0 + sl * sl))
        return stable(mean), stable(np.sqrt(np.maximum(second - mean * mean, 0.0)))

    def p_feasible(self, X: np.ndarray) -> np.ndarray:
        """P(peak <= capacity) under the predictive distribution (parameter + observation noise), averaged over
        the two forms."""
        (ma, sa), (ml, sl) = self._forms(X)
        pa = norm.cdf((self.capacity - ma) / np.sqrt(sa * sa + self.obs_sd ** 2))
        if self.w_additive == 1.0:
            return stable(pa)
        pl = norm.cdf((math.log(self.capacity) - ml) / np.sqrt(sl * sl + LOG_OBS_SD ** 2))
        return stable(self.w_additive * pa + (1.0 - self.w_additive) * pl)


#: predictive SDs by which a told peak must miss the additive prediction to admit memory pairs
MEMORY_PAIR_Z = 3.0
#: the values of the ``memory_forms`` tuning key
MEMORY_FORMS = ("additive", "mixture")
#: prior weight of the additive memory form under ``forms="mixture"`` (the rest goes to the multiplicative one)
ADDITIVE_PRIOR_WEIGHT = 0.5
#: the log form's observation SD (a relative error; the additive form's is 2% of capacity)
LOG_OBS_SD = 0.02


#: mechanisms whose memory is activation memory (it scales with the micro-batch, the stored share, 1 / (TP x CP x
#: SP) and the attention kernel's factor), so two of them compound rather than add
ACTIVATION_MECHANISMS = frozenset({"micro_batch", "activation_checkpointing", "tensor_parallel", "context_parallel",
                                   "sequence_parallel", "attention_kernel"})


def _activation_pairs(space: SearchSpace, fmap: FeatureMap) -> list[tuple[int, int]]:
    """Pairs (a, b), a < b, of single columns of two different knobs that are both activation mechanisms."""
    from infrarsi.controller.experience.mechanisms import normalize

    knob_of: dict[int, str] = {}
    for i, (name, _value) in enumerate(fmap.singles):
        if name == PATCH:
            continue
        knob = space.knob(name)
        if normalize(knob.name, knob.mechanism, None)[0] in ACTIVATION_MECHANISMS:
            knob_of[i] = name
    return [(a, b) for a, b in itertools.combinations(sorted(knob_of), 2) if knob_of[a] != knob_of[b]]


def _prior_predict(mu: np.ndarray, var: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, sd) per row of the design ``D`` under a prior alone (intercept first in ``mu`` and ``var``)."""
    return mu[0] + D @ mu[1:], np.sqrt(var[0] + D * D @ var[1:])


def _log_prior(mu: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The log form's prior (mean, variance) from the additive one's (GiB): the intercept ln(base) with SD
    sd/base; a setting's delta m +- s the ratio ln((base + m) / base), its SD half the log width of
    [base + m - s, base + m + s] (both ends floored at 5% of base)."""
    base = float(mu[0])
    lmu, lsd = np.zeros_like(mu), np.zeros_like(sd)
    lmu[0], lsd[0] = math.log(base), float(sd[0]) / base
    floor = 0.05 * base
    for i in range(1, len(mu)):
        m, s = float(mu[i]), float(sd[i])
        lmu[i] = math.log(max(base + m, floor) / base)
        lsd[i] = max(0.5 * (math.log(max(base + m + s, floor)) - math.log(max(base + m - s, floor))), 0.01)
    return lmu, lsd * lsd


def memory_rows(history: Sequence[tuple[Candidate, Outcome]], capacity: float) -> tuple[list[int], list[float], list[str]]:
    """Indices into ``history`` usable by the memory model, with targets and censoring kinds."""
    idx, y, kind = [], [], []
    for i, (_, o) in enumerate(history):
        if o.status == "ok" and o.peak_mem_gib is not None:
            idx.append(i)
            y.append(float(o.peak_mem_gib))
            kind.append("near_cap" if o.peak_mem_gib >= 0.98 * capacity else "exact")
        elif o.status == "oom":
            cap = o.capacity_gib or capacity
            req = o.requested_gib if o.requested_gib and o.requested_gib > cap else cap * 1.02
            idx.append(i)
            y.append(float(req))
            kind.append("oom")
    return idx, y, kind


def log_speedup(reference_s: float, step_s: float) -> float:
    return math.log(reference_s / step_s)
