"""What the engine, the launcher and the state functions derive from a campaign record alone: its parsed contract
(cached per campaign id: a stored contract never changes), its effective launch section, the GPUs of one trial and
the judge spec.  No store or executor access."""

from __future__ import annotations

import io

from infrarsi.controller.campaign.sbatch_options import SbatchOptions
from infrarsi.controller.contract.model import Contract, Launch
from infrarsi.controller.store.records import CampaignRecord
from infrarsi.controller.store.stage_records import doctor_or_none, scope_or_none
from infrarsi.verifier.spec import JudgeSpec


def parse_contract_yaml(text: str) -> Contract:
    """Validate a stored contract (already checked at submit time) into the model."""
    from ruamel.yaml import YAML

    from infrarsi.controller.contract.loader import _plain

    return Contract.model_validate(_plain(YAML(typ="rt").load(io.StringIO(text))))


class CampaignContracts:
    """Parsed contracts by campaign id, and what follows from a campaign record and its contract."""

    def __init__(self) -> None:
        self._contracts: dict[int, Contract] = {}

    def contract(self, c: CampaignRecord) -> Contract:
        """The campaign's contract, parsed once per campaign id."""
        if c.id not in self._contracts:
            self._contracts[c.id] = parse_contract_yaml(c.contract_yaml)
        return self._contracts[c.id]

    def launch_of(self, c: CampaignRecord) -> Launch:
        """The campaign's effective launch section: the contract's, with ``infrarsi submit``'s sbatch options."""
        return SbatchOptions.from_dict(c.sbatch).launch(self.contract(c).launch)

    def devices(self, c: CampaignRecord) -> int:
        """GPUs of one trial (at least 1: a CPU trial occupies one slot)."""
        launch = self.launch_of(c)
        return max(1, launch.nodes * max(1, launch.gpus_per_node))

    @staticmethod
    def judge_spec(c: CampaignRecord) -> JudgeSpec:
        """The verifier's spec: the scope's locked judge spec with the doctor's ``sigma_pair`` once known."""
        scope, doctor = scope_or_none(c), doctor_or_none(c)
        d = dict(scope.judge_spec) if scope else {}
        if doctor:
            d["sigma_pair"] = doctor.sigma_pair
        return JudgeSpec.from_dict(d)
