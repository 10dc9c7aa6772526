"""Benchmark landscapes: loading, simulated trials, and the noise-free truth.

A landscape is a Python file defining ``KNOBS`` (list of dicts with name,
values, reference and optional prior_mean / prior_sd / mem_prior_gib /
ordered / mechanism), optional ``PATCHES``, ``CAPACITY_GIB`` and
``evaluate(config, patches, rng) -> dict`` (see ``bench/README.md``).
Optional: ``PEAK_SPEEDUP``, ``is_legal(config)``, ``GPUS`` (default 8),
``TRIAL_UPDATES`` (default 40), ``TRIAL_OVERHEAD_S`` (default 90),
``PATCH_PRIORS``.

Simulated cost of a trial, in GPU hours:
``(TRIAL_OVERHEAD_S + TRIAL_UPDATES * step_time_s) / 3600 * GPUS`` for a run
that completes (rejected runs included); OOMs and crashes cost the overhead
plus two reference steps (they die early).
"""

from __future__ import annotations

import importlib.util
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np

from infrarsi.controller.errors import InfrarsiError
from infrarsi.controller.search.space import Candidate, KnobSpec, Outcome, SearchSpace

LOSS_TOLERANCE = 0.03  # relative loss deviation beyond which L4 rejects a trial
BRUTE_FORCE_LIMIT = 250_000


class LandscapeError(InfrarsiError):
    """A landscape file is missing or malformed."""


def simulate_run(true_step_s: float, rng: np.random.Generator | None, run_sd: float, step_sd: float,
                 steps: int = 24) -> tuple[float, list[float]]:
    """A run's window mean and per-step times: a run-level log offset plus white per-step log noise.

    With ``rng=None`` returns the truth (``true_step_s`` and a flat trace).
    """
    if rng is None:
        return true_step_s, [true_step_s] * steps
    offset = rng.normal(0.0, run_sd)
    st = true_step_s * np.exp(offset + rng.normal(0.0, step_sd, steps))
    return float(st.mean()), [float(x) for x in st]


@dataclass
class Landscape:
    """A loaded landscape with its search space and cached noise-free truth."""

    name: str
    path: Path
    module: ModuleType
    space: SearchSpace
    capacity_gib: float
    gpus: int
    updates: int
    overhead_s: float
    _truth: dict[Candidate, dict] = field(default_factory=dict)

    def raw(self, cand: Candidate, rng: np.random.Generator | None) -> dict:
        res = self.module.evaluate(cand.as_dict(), sorted(cand.patches), rng)
        if not isinstance(res, dict) or res.get("status") not in ("ok", "oom", "crash"):
            raise LandscapeError(f"{self.path}: evaluate() must return a dict with status ok/oom/crash, got {res!r}")
        return res

    def truth(self, cand: Candidate) -> dict:
        if cand not in self._truth:
            self._truth[cand] = self.raw(cand, None)
        return self._truth[cand]

    @property
    def reference_loss(self) -> float:
        return float(self.truth(self.space.reference())["loss"])

    @property
    def reference_time(self) -> float:
        return float(self.truth(self.space.reference())["step_time_s"])

    def numerically_ok(self, res: dict) -> bool:
        ref = self.reference_loss
        return abs(float(res["loss"]) - ref) <= LOSS_TOLERANCE * abs(ref)

    def true_speedup(self, cand: Candidate | None) -> float | None:
        """Noise-free speedup vs reference; None if the candidate fails or is numerically rejected."""
        if cand is None:
            return 1.0
        res = self.truth(cand)
        if res["status"] != "ok" or not self.numerically_ok(res):
            return None
        return self.reference_time / float(res["step_time_s"])

    def to_outcome(self, res: dict) -> Outcome:
        ref_s = self.reference_time
        if res["status"] == "ok":
            t = float(res["step_time_s"])
            hours = (self.overhead_s + self.updates * t) / 3600 * self.gpus
            if not self.numerically_ok(res):
                return Outcome("rejected", step_time_s=t, peak_mem_gib=res.get("peak_mem_gib"),
                               reason=f"loss {res['loss']:.5g} beyond tolerance {LOSS_TOLERANCE}",
                               rejected_layer="L4", gpu_hours=hours)
            return Outcome("ok", step_time_s=t, peak_mem_gib=res.get("peak_mem_gib"), gpu_hours=hours)
        hours = (self.overhead_s + 2 * ref_s) / 3600 * self.gpus
        if res["status"] == "oom":
            return Outcome("oom", requested_gib=float(res["requested_gib"]),
                           capacity_gib=float(res.get("capacity_gib", self.capacity_gib)), gpu_hours=hours)
        return Outcome("crash", reason=str(res.get("reason", "")), gpu_hours=hours)

    def evaluator(self, rng: np.random.Generator) -> Callable[[Candidate], Outcome]:
        """A noisy ``evaluate`` callback for :func:`run_search`."""
        return lambda cand: self.to_outcome(self.raw(cand, rng))

    def peak_speedup(self) -> float:
        """``PEAK_SPEEDUP`` if defined, else brute force over every legal configuration and patch subset."""
        if hasattr(self.module, "PEAK_SPEEDUP"):
            return float(self.module.PEAK_SPEEDUP)
        if self.space.size() > BRUTE_FORCE_LIMIT:
            raise LandscapeError(f"{self.path}: space of {self.space.size()} points is too large; define PEAK_SPEEDUP")
        best = 1.0
        knobs = self.space.knobs
        subsets = [frozenset(s) for r in range(len(self.space.patches) + 1)
                   for s in itertools.combinations(self.space.patches, r)]
        for values in itertools.product(*(k.values for k in knobs)):
            d = {k.name: v for k, v in zip(knobs, values)}
            if not self.space.legal(d):
                continue
            for ps in subsets:
                sp = self.true_speedup(Candidate.from_dict(d, ps))
                if sp is not None and sp > best:
                    best = sp
        self._truth.clear()
        return best


def load_landscape(path: str | Path) -> Landscape:
    """Import a landscape file; raises :class:`LandscapeError` naming the file and the missing field."""
    p = Path(path)
    if not p.is_file():
        raise LandscapeError(f"{p}: landscape file not found")
    spec = importlib.util.spec_from_file_location(f"infrarsi_landscape_{p.stem}", p)
    if spec is None or spec.loader is None:
        raise LandscapeError(f"{p}: cannot import as a Python module")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:  # a user file: report any import failure as one line
        raise LandscapeError(f"{p}: import failed: {type(exc).__name__}: {exc}") from exc
    for attr in ("KNOBS", "CAPACITY_GIB", "evaluate"):
        if not hasattr(mod, attr):
            raise LandscapeError(f"{p}: missing {attr}")
    try:
        knobs = tuple(KnobSpec.from_dict(d) for d in mod.KNOBS)
        space = SearchSpace(knobs, tuple(getattr(mod, "PATCHES", ())), getattr(mod, "is_legal", None))
    except (ValueError, TypeError, KeyError) as exc:
        raise LandscapeError(f"{p}: KNOBS: {exc}") from exc
    land = Landscape(p.stem, p, mod, space, float(mod.CAPACITY_GIB), int(getattr(mod, "GPUS", 8)),
                     int(getattr(mod, "TRIAL_UPDATES", 40)), float(getattr(mod, "TRIAL_OVERHEAD_S", 90.0)))
    ref = land.truth(space.reference())
    if ref.get("status") != "ok" or not math.isfinite(float(ref.get("loss", float("nan")))):
        raise LandscapeError(f"{p}: the reference must evaluate to status ok with a finite loss")
    return land
