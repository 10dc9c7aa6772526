"""The receipt matrix: a tiny CPU training job, its perturbation cases, and the runner behind ``infrarsi verify matrix``."""
