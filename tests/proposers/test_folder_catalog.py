"""FolderProposer (the patch folder as a proposer) and CatalogProposer (priors from the mechanism catalog)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infrarsi.controller.proposers.base import PatchRules, PromptContext, build_proposers
from infrarsi.controller.proposers.catalog import CatalogProposer, catalog_priors
from infrarsi.controller.proposers.folder import FolderProposer
from infrarsi.controller.proposers.spec import CatalogSpec, FolderSpec, ProposersSpec
from tests.proposers.proposer_fixtures import EXAMPLE


def test_folder_returns_its_patches_by_file_name_and_lists_refusals(contract, rules, ctx: PromptContext) -> None:
    out = FolderProposer(FolderSpec(kind="folder"), contract=contract, rules=rules).propose(ctx)
    assert out.ok and out.proposer == "folder" and out.kind == "folder" and out.tokens_in == 0
    names = [p.name for p in out.proposal.patches]
    expected = sorted(p.name for p in (EXAMPLE / "patches").iterdir() if p.suffix in (".diff", ".patch"))
    assert names == [n for n in expected if n != "touch_data.diff"]
    assert all(p.claimed_gain == 0.0 for p in out.proposal.patches)
    assert [d[0] for d in out.dropped] == ["touch_data.diff"] and "frozen file 'data.py'" in out.dropped[0][1]
    texts = {p.name: p.diff for p in out.proposal.patches}
    assert texts["fused_qkv.diff"] == (EXAMPLE / "patches" / "fused_qkv.diff").read_text()


def test_folder_missing_or_unset(contract, rules, ctx, tmp_path: Path) -> None:
    out = FolderProposer(FolderSpec(kind="folder", dir="nowhere"), contract=contract, rules=rules).propose(ctx)
    assert not out.ok and "nowhere is not a directory" in out.reason and "\n" not in out.reason
    empty = contract.model_copy(update={"patches": contract.patches.model_copy(update={"dir": None})})
    out = FolderProposer(FolderSpec(kind="folder"), contract=empty, rules=rules).propose(ctx)
    assert out.ok and out.proposal.empty and "no patch folder" in out.reason


def test_folder_rationale_from_a_leading_comment(contract, ctx, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", "patches"))
    (repo / "p").mkdir()
    text = (EXAMPLE / "patches" / "zero_grad_set_to_none.diff").read_text()
    (repo / "p" / "z.patch").write_text("# Free gradients instead of zeroing them.\n\n" + text)
    rules = PatchRules.from_contract(contract, repo)
    out = FolderProposer(FolderSpec(kind="folder", dir="p"), contract=contract, rules=rules).propose(ctx)
    (patch,) = out.proposal.patches
    assert out.ok and patch.name == "z.patch" and patch.rationale == "Free gradients instead of zeroing them."


def test_catalog_priors_for_the_example(contract, ctx) -> None:
    out = CatalogProposer(CatalogSpec(kind="catalog"), contract=contract).propose(ctx)
    assert out.ok and out.proposal.patches == [] and out.usd is None
    priors = {(p.knob, p.value): p for p in out.proposal.priors}
    from infrarsi.controller.experience.mechanisms import CATALOG

    mp = CATALOG["mixed_precision"]
    assert priors[("dtype", "bf16")].mean_log_speedup == pytest.approx(mp.prior_log_speedup)
    assert priors[("dtype", "bf16")].mem_gib == pytest.approx(mp.mem_gib)
    ac = CATALOG["activation_checkpointing"]
    # the example's reference has checkpointing ON; turning it off is the mechanism's effect with the sign flipped
    off = [p for (k, _v), p in priors.items() if k == "activation_checkpointing"]
    assert off and off[0].mean_log_speedup == pytest.approx(-ac.prior_log_speedup)
    of = CATALOG["optimizer_fusion"]
    knob = contract.knob("optimizer_impl")
    if {"loop", "foreach", "fused"} <= {str(v) for v in knob.values} and knob.reference == "loop":
        assert priors[("optimizer_impl", "fused")].mean_log_speedup == pytest.approx(of.prior_log_speedup)
        assert priors[("optimizer_impl", "foreach")].mean_log_speedup == pytest.approx(of.prior_log_speedup / 2)
    assert ("micro_batch", "2") not in priors  # open value sets get no catalog prior
    assert all(p.spread > 0 for p in priors.values())
    assert all((p.knob, p.value) != (p.knob, str(contract.knob(p.knob).reference)) for p in priors.values())


def test_catalog_ignores_knobs_it_cannot_place() -> None:
    class K:
        def __init__(self, name, values, reference, mechanism=None):
            self.name, self.values, self.reference, self.mechanism = name, values, reference, mechanism

    priors = catalog_priors([K("warp", [0, 1], 0, "warp_drive"), K("workers", [1, 2, 4], 1, "dataloader_workers"),
                             K("use_compile", [False, True], False)])
    assert [(p.knob, p.value) for p in priors] == [("use_compile", "true")]  # resolved by its name


def test_build_proposers_follows_the_spec(contract, tmp_path: Path) -> None:
    spec = ProposersSpec.model_validate([
        {"kind": "folder"}, {"kind": "catalog"},
        {"kind": "llm", "name": "gpt", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
        {"kind": "agent", "name": "claude", "command": "claude -p", "max_concurrent": 2}])
    ps = build_proposers(spec, contract=contract, repo=EXAMPLE, workdir=tmp_path, isolation="none")
    assert [(p.name, p.kind) for p in ps] == [("folder", "folder"), ("catalog", "catalog"), ("gpt", "llm"),
                                              ("claude", "agent")]
    assert ps[2].model == "m" and ps[3].model == "claude" and ps[3].max_concurrent == 2


def test_a_proposer_bug_is_a_failed_outcome(ctx) -> None:
    from infrarsi.controller.proposers.base import Proposer, ProposerOutcome

    class Broken(Proposer):
        name, kind = "broken", "llm"

        def propose(self, ctx: PromptContext) -> ProposerOutcome:
            raise OSError("disk on fire\nsecond line")

    out = Broken().propose(ctx)
    assert not out.ok and out.reason == "internal error in proposer: OSError: disk on fire"
    assert out.proposer == "broken" and out.proposal is None


def test_repeated_diffs_are_refused(rules) -> None:
    from infrarsi.controller.proposers.base import validate_patches
    from infrarsi.controller.proposers.schema import PatchProposal

    d = (EXAMPLE / "patches" / "fused_qkv.diff").read_text()
    good, bad = validate_patches([PatchProposal(diff=d), PatchProposal(diff=d)], rules, "gpt")
    assert len(good) == 1 and bad == [("gpt-2", "patch gpt-2: the same diff as gpt-1")]
