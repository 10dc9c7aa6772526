"""Statistics the search stands on (paper sections 4.1-4.2).

numpy/scipy only; no database, no I/O, no import of ``controller``.

Public API:
    calibrate(reference_runs) -> NoiseModel            (infrarsi.surrogate.noise)
    BayesLinearTimeModel(prior_mean, prior_var, noise_var)  (infrarsi.surrogate.time_model)
    TobitMemoryModel(capacity_gib, prior_mean=None, prior_var=None)  (infrarsi.surrogate.memory_model)
    amdahl_ceiling, cap_log_speedup                    (infrarsi.surrogate.amdahl)
    empirical_bayes_revision, shrink_patch_prior, floor_prior_sd  (infrarsi.surrogate.priors)
    SurrogateError                                     (infrarsi.surrogate.errors)
"""

from infrarsi.surrogate.amdahl import amdahl_ceiling, cap_log_speedup, phase_share
from infrarsi.surrogate.errors import SurrogateError
from infrarsi.surrogate.memory_model import FeatureMemoryEstimate, TobitMemoryModel
from infrarsi.surrogate.noise import NoiseModel, calibrate, window_log_mean
from infrarsi.surrogate.priors import (
    PriorRevision,
    empirical_bayes_revision,
    floor_prior_sd,
    revise_kappa,
    shrink_patch_prior,
)
from infrarsi.surrogate.time_model import BayesLinearTimeModel

__all__ = [
    "BayesLinearTimeModel",
    "FeatureMemoryEstimate",
    "NoiseModel",
    "PriorRevision",
    "SurrogateError",
    "TobitMemoryModel",
    "amdahl_ceiling",
    "calibrate",
    "cap_log_speedup",
    "empirical_bayes_revision",
    "floor_prior_sd",
    "phase_share",
    "revise_kappa",
    "shrink_patch_prior",
    "window_log_mean",
]
