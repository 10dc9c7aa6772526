"""Statistics the search stands on (paper sections 4.1-4.2).

numpy/scipy only; no database, no I/O, no import of ``controller``.

Public API:
    calibrate(reference_runs) -> NoiseModel            (surrogate.noise)
    BayesLinearTimeModel(prior_mean, prior_var, noise_var)  (surrogate.time_model)
    TobitMemoryModel(capacity_gib, prior_mean=None, prior_var=None)  (surrogate.memory_model)
    amdahl_ceiling, cap_log_speedup                    (surrogate.amdahl)
    empirical_bayes_revision, shrink_patch_prior, floor_prior_sd  (surrogate.priors)
    SurrogateError                                     (surrogate.errors)
"""

from surrogate.amdahl import amdahl_ceiling, cap_log_speedup, phase_share
from surrogate.errors import SurrogateError
from surrogate.memory_model import FeatureMemoryEstimate, TobitMemoryModel
from surrogate.noise import NoiseModel, calibrate, window_log_mean
from surrogate.priors import (
    PriorRevision,
    empirical_bayes_revision,
    floor_prior_sd,
    revise_kappa,
    shrink_patch_prior,
)
from surrogate.time_model import BayesLinearTimeModel

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
