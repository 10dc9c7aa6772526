"""The task contract: models, a line-numbered loader, cross-field checks and the knob algebra."""

from infrarsi.controller.contract.checks import complete_config, is_legal, legal_configs
from infrarsi.controller.contract.launch import LaunchPlan, render_launch
from infrarsi.controller.contract.loader import check_contract, contract_digest, load_contract, repo_dir
from infrarsi.controller.contract.model import Contract, Knob

__all__ = [
    "Contract", "Knob", "LaunchPlan", "check_contract", "complete_config", "contract_digest", "is_legal",
    "legal_configs", "load_contract", "render_launch", "repo_dir",
]
