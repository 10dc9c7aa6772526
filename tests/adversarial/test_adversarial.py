"""The adversarial matrix, one real attack per test (``infrarsi.controller.adversarial``).

Each test runs the attacker's code as a real trial through the controller's trial path (scope lock, patch intake,
prepare_source, build_spec, a real executor, build_ingest against real reference receipts) and asserts the case's
predicate: the attack is refused, rejected where expected, or has no effect, and nothing recorded changed (the
user's repo, its hooks and HEAD, victim files, the master key).  Every test performs the attack; on the code
before the "Trust" work 9 of the 10 fail (all but clock_forgery) (see docs/security.md for which defence stops which).
"""

from __future__ import annotations

import pytest

from infrarsi.controller.adversarial.cases import CASE_NAMES
from infrarsi.controller.adversarial.runner import AdvResult, run_case


def _assert_stopped(r: AdvResult) -> None:
    if r.skipped:
        pytest.skip(r.skipped)
    assert r.agree, f"{r.case.name}: expected '{r.case.expect}', observed '{r.obs.label}': {r.why}"


def test_forge_after_exit_local() -> None:
    r = run_case("forge_after_exit")
    _assert_stopped(r)
    assert not r.obs.forged and r.obs.outcome == "ok"


def test_key_read_local() -> None:
    r = run_case("key_read")
    _assert_stopped(r)
    assert not r.obs.found("ADV-FOUND")


@pytest.mark.postgres
def test_env_read_local(pg_admin: str) -> None:
    r = run_case("env_read", db_admin_url=pg_admin)
    _assert_stopped(r)
    assert r.obs.db_value == 1.0


def test_wrapper_shadow_local() -> None:
    _assert_stopped(run_case("wrapper_shadow"))


def test_git_hook_local() -> None:
    r = run_case("git_hook")
    _assert_stopped(r)
    assert not r.obs.hook_ran


def test_detached_survivor_local() -> None:
    r = run_case("detached_survivor")
    _assert_stopped(r)
    assert r.obs.survivors == []


def test_oversized_receipt_local() -> None:
    _assert_stopped(run_case("oversized_receipt"))


def test_binary_hunk_refused_at_intake() -> None:
    _assert_stopped(run_case("binary_hunk"))


def test_symlink_escape_refused() -> None:
    _assert_stopped(run_case("symlink_escape"))


def test_clock_forgery_rejected_at_l5() -> None:
    r = run_case("clock_forgery")
    _assert_stopped(r)
    assert r.obs.first_failed_layer == "L5"


@pytest.mark.slurm
def test_frozen_trap_rejected_at_l2() -> None:
    r = run_case("frozen_trap")
    _assert_stopped(r)
    assert r.obs.first_failed_layer == "L2"


@pytest.mark.slurm
@pytest.mark.parametrize("name", ["forge_after_exit", "detached_survivor", "key_read"])
def test_key_attacks_on_slurm(name: str, slurm_up: None) -> None:
    _assert_stopped(run_case(name, executor="slurm"))


@pytest.mark.slurm
@pytest.mark.postgres
def test_env_read_on_slurm(slurm_up: None, pg_admin: str) -> None:
    r = run_case("env_read", executor="slurm", db_admin_url=pg_admin)
    _assert_stopped(r)
    assert r.obs.db_value == 1.0


def test_every_case_has_a_test() -> None:
    import inspect
    import sys

    src = inspect.getsource(sys.modules[__name__])
    assert all(f"test_{n}" in src for n in CASE_NAMES)
