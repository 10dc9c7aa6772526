"""The full receipt matrix: real tiny CPU jobs under the real wrapper, every verdict as expected."""

from __future__ import annotations

import pytest

from infrarsi.verifier.matrix.cases import CASES


def test_case_list_covers_the_brief():
    names = {c.name for c in CASES}
    assert len(CASES) >= 40 and len(names) == len(CASES)
    assert sum(not c.benign for c in CASES) >= 28 and sum(c.benign for c in CASES) >= 12
    expected = {c.expect for c in CASES if not c.benign}
    for inv in ("completes", "no_errors", "memory_cap", "same_workload", "same_data", "same_model", "frozen_files",
                "optimizer_steps", "loss_within_tolerance", "grad_norm_within_tol", "precision",
                "timing_consistent", "signature"):
        assert inv in expected, inv


NUMERICAL_CHEATS = ("skip_after_first", "skip_after_k", "skip_every_third", "half_sequence_loss", "grad_rescaled",
                    "clip_trajectory")


def test_numerical_cheats_that_choose_where_to_cheat_are_cases():
    from infrarsi.verifier.matrix.train import PERTURBATIONS

    by_name = {c.name: c for c in CASES}
    for name in NUMERICAL_CHEATS:
        assert name in PERTURBATIONS and not by_name[name].benign and by_name[name].expect.startswith("loss")


@pytest.mark.slow
def test_numerical_cheats_are_rejected_by_every_l4_check():
    """Real runs: each cheat fails the per-update loss and gradient norm, the eval loss and the parameter checksum."""
    from infrarsi.verifier.matrix.runner import run_matrix

    results = run_matrix(jobs=2, only=list(NUMERICAL_CHEATS) + ["microbatch_4", "bf16_in_menu"])
    for r in results:
        if r.case.benign:
            assert r.verdict.accepted, r.verdict.summary()
        else:
            assert {"loss_within_tolerance", "grad_norm_within_tol", "eval_matches", "params_match"} <= \
                {it.name for it in r.verdict.rejecting}, (r.case.name, r.verdict.summary())


@pytest.mark.slow
def test_full_matrix_agrees():
    from infrarsi.verifier.matrix.runner import format_matrix, run_matrix

    results = run_matrix(jobs=2)
    # a benign case rejected by L5 timing alone is run once more: on a shared 2-vCPU machine a stall between two
    # update stamps can skew the wrapper's clock from the job's by 15% (seen once in CI: warmup_spikes, |delta ln|
    # 0.153), and the skew then measured the machine, not the job.  The judge now excuses stalls between a
    # minority of stamps (per-update offsets agree in the median); this re-run covers the rest.  A cheat is never
    # re-run, and a benign case that skews again still fails here.
    skewed = [r.case.name for r in results if r.case.benign and not r.verdict.accepted
              and {it.name for it in r.verdict.rejecting} == {"timing_consistent"}]
    if skewed:
        again = {r.case.name: r for r in run_matrix(jobs=1, only=skewed)}
        results = [again.get(r.case.name, r) for r in results]
    table = format_matrix(results)
    assert len(results) == len(CASES)
    assert table.splitlines()[-1] == f"agreement: {len(results)}/{len(results)}", table
    for r in results:
        if not r.case.benign:
            assert "\n" not in r.verdict.summary() and r.verdict.first_failed is not None
