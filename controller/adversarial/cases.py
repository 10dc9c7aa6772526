"""The adversarial matrix's cases: an attack, where it should be stopped, and the predicate that says it was.

Every case is a real run through the trial path (see :mod:`infrarsi.controller.adversarial.runner`); what the run
left behind is gathered into an :class:`Observation` and the case's ``check`` decides whether the observed outcome
is the expected one.  ``expect`` is printed as the contract of the case:

* ``refused at intake: <substring>`` -- the patch never runs;
* ``rejected at <layer>/<invariant>`` -- the trial ran and the verifier rejected it there;
* ``no effect: <predicate>`` -- the trial ran and the attack changed nothing it was after.

Independently of the check, the runner verifies for every case that nothing recorded changed (the user's repo
status, HEAD and hooks, victim files outside the repo, the master key); any change disagrees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: a stored job.log larger than this is not capped (the flood writes 50 MiB)
LOG_FLOOD_BYTES = 50 * 1024 * 1024
#: the controller may use this much Python heap to ingest the oversized receipt
INGEST_PEAK_LIMIT = 128 * 1024 * 1024
#: "not forged": the trial's window step time is at least this fraction of the references'
HONEST_SPEED_FLOOR = 0.75


@dataclass
class Observation:
    """What one case's run produced (filled by the runner; every field optional)."""

    refused: dict[str, str] = field(default_factory=dict)
    stage_error: str | None = None
    outcome: str | None = None
    reason: str = ""
    first_failed_layer: str | None = None
    rejecting: list[str] = field(default_factory=list)
    receipt: dict[str, Any] | None = None
    log_text: str = ""
    log_bytes: int = 0
    ref_step_s: float | None = None
    trial_step_s: float | None = None
    after_ref_step_s: float | None = None
    survivors: list[int] = field(default_factory=list)
    hook_ran: bool = False
    db_value: float | None = None
    ingest_peak_bytes: int | None = None
    changed: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The observed outcome in the same words as ``Case.expect``."""
        if self.stage_error is not None:
            return f"refused before the run: {self.stage_error}"
        if self.refused and self.outcome is None:
            return f"refused at intake: {'; '.join(why for _, why in sorted(self.refused.items()))}"
        if self.outcome == "rejected":
            return f"rejected at {self.reason}"
        if self.outcome == "ok":
            return "accepted"
        return f"{self.outcome}: {self.reason}" if self.outcome else "not run"

    @property
    def forged(self) -> bool:
        """The ingested receipt was written or rewritten by the attacker."""
        return bool((self.receipt or {}).get("adv_forged"))

    @property
    def speed_ratio(self) -> float | None:
        """reference window step time / trial window step time (2.0: the trial looks twice as fast)."""
        if self.ref_step_s and self.trial_step_s:
            return self.ref_step_s / self.trial_step_s
        return None

    def found(self, tag: str) -> list[str]:
        """The job's own ``ADV-...`` report lines starting with ``tag``."""
        return [ln for ln in self.log_text.splitlines() if ln.startswith(tag)]


Check = Callable[[Observation], tuple[bool, str]]


@dataclass(frozen=True)
class Case:
    """One attack.  ``runs``: the attack trial is launched (False: intake/scope must refuse it first)."""

    name: str
    expect: str
    check: Check
    runs: bool = True
    needs_db: bool = False
    note: str = ""
    #: the payload prints ``ADV-RAN <case>`` to the job log; a run without that line proves nothing
    reports_run: bool = True

    def judge(self, o: Observation) -> tuple[bool, str]:
        """The case's predicate, plus: when the attack trial ran, its payload must have run too."""
        ok, why = self.check(o)
        if self.runs and self.reports_run and o.outcome is not None and not o.found(f"ADV-RAN {self.name}"):
            return False, f"the attack code never ran (no 'ADV-RAN {self.name}' in job.log); {why}"
        return ok, why


def _all(*parts: tuple[bool, str]) -> tuple[bool, str]:
    bad = [why for ok, why in parts if not ok]
    return (not bad, "; ".join(bad) if bad else "ok")


def _not_forged(o: Observation) -> tuple[bool, str]:
    if o.outcome is None:
        return False, f"the trial did not run ({o.label})"
    if o.forged:
        return False, f"the ingested receipt was forged by the job ({o.receipt.get('adv_forged')}): {o.label}"
    r = o.speed_ratio
    if r is not None and r > 1 / HONEST_SPEED_FLOOR:
        return False, f"the trial looks {r:.2f}x faster than the references"
    return True, "ok"


def _check_forge(o: Observation) -> tuple[bool, str]:
    return _not_forged(o)


def _check_key_read(o: Observation) -> tuple[bool, str]:
    keys = o.found("ADV-FOUND")
    return _all((not keys, f"the job read a key: {keys[0][10:] if keys else ''}"), _not_forged(o))


def _check_env_read(o: Observation) -> tuple[bool, str]:
    leaked = [ln for ln in o.found("ADV-ENV") if "INFRARSI_DATABASE_URL" in ln or "INFRARSI_HOME" in ln
              or "INFRARSI_KEY_FILE" in ln]
    return _all((not leaked, f"the job saw {leaked[0][8:].split('=')[0] if leaked else ''}"),
                (o.db_value != 42, "campaigns.delivered_speedup was set to 42 by the job"),
                (not o.found("ADV-GUESSED"), "the job reached the host's database at a guessed address"),
                (o.outcome is not None, f"the trial did not run ({o.label})"))


def _check_shadow(o: Observation) -> tuple[bool, str]:
    return _all((not o.found("ADV-SHADOW"), "a fake wrapper from the trial tree ran"), _not_forged(o),
                (o.outcome == "ok", f"the honest job was not accepted: {o.label}"))


def _check_git_hook(o: Observation) -> tuple[bool, str]:
    wrote = [ln for ln in o.found("ADV-HOOK wrote")]
    return _all((not o.hook_ran, "a planted git hook ran during the next prepare_source"),
                (not wrote, f"the job wrote {wrote[0][15:] if wrote else ''}"),
                (o.outcome is not None, f"the trial did not run ({o.label})"))


def _check_survivor(o: Observation) -> tuple[bool, str]:
    slowed = (o.after_ref_step_s is not None and o.ref_step_s is not None
              and o.after_ref_step_s > 1.5 * o.ref_step_s)
    return _all((not o.survivors, f"{len(o.survivors)} process(es) of the job still run after it ended "
                                  f"(pids {', '.join(map(str, o.survivors[:5]))})"),
                (not slowed, f"the next reference run was slowed ({(o.after_ref_step_s or 0) * 1000:.1f} ms vs "
                             f"{(o.ref_step_s or 0) * 1000:.1f} ms per update)"),
                (o.outcome is not None, f"the trial did not run ({o.label})"))


def _check_oversized(o: Observation) -> tuple[bool, str]:
    return _all((o.first_failed_layer == "L1", f"expected a rejection at L1, got {o.label}"),
                (o.ingest_peak_bytes is not None and o.ingest_peak_bytes < INGEST_PEAK_LIMIT,
                 f"the controller used {(o.ingest_peak_bytes or 0) / 2**20:.0f} MiB to ingest it "
                 f"(limit {INGEST_PEAK_LIMIT / 2**20:.0f} MiB)"),
                (o.log_bytes < LOG_FLOOD_BYTES // 2, f"the stored job.log is {o.log_bytes / 2**20:.1f} MiB "
                                                     f"(not capped)"))


def _check_binary(o: Observation) -> tuple[bool, str]:
    want = ("git_binary.diff", "binary_after_devnull.diff")
    missing = [n for n in want if "binary" not in o.refused.get(n, "")]
    return (not missing, f"{missing[0]} was not refused as binary" if missing else "ok")


def _check_symlink(o: Observation) -> tuple[bool, str]:
    patch = o.refused.get("edit_through_symlink_dir.diff", "")
    knob = o.stage_error or ""
    return _all(("symlink" in patch, "the patch through the symlinked directory was not refused as a symlink"),
                (("symlink" in knob or "outside the repo" in knob),
                 f"the config knob written through conf.json -> outside was not refused (got {o.label})"))


def _check_clock(o: Observation) -> tuple[bool, str]:
    return (o.first_failed_layer == "L5", f"expected a rejection at L5, got {o.label}")


def _check_frozen_trap(o: Observation) -> tuple[bool, str]:
    return _all((bool(o.found("ADV-SWAPPED")), "the job could not swap the frozen file (the attack did not happen)"),
                (o.first_failed_layer == "L2" and "frozen_files" in o.label,
                 f"expected a rejection at L2 frozen_files, got {o.label}"))


CASES: tuple[Case, ...] = (
    Case("forge_after_exit", "no effect: the ingested receipt is the wrapper's (not halved, not re-signed)",
         _check_forge, note="setsid child waits for out/receipt.json, halves every time, re-signs with the master"),
    Case("key_read", "no effect: the job finds no key (master or trial) and forges nothing", _check_key_read,
         note="INFRARSI_HOME, INFRARSI_KEY_FILE, ~/.local/state, ../out/trial.key, /proc/*/environ"),
    Case("env_read", "no effect: no INFRARSI_DATABASE_URL in the job's env, the host's database unreachable, "
                     "delivered_speedup unchanged",
         _check_env_read, needs_db=True, note="UPDATE campaigns SET delivered_speedup = 42 through the job's env"),
    Case("wrapper_shadow", "no effect: the real wrapper runs; the trial tree's verifier/exec.py is never imported",
         _check_shadow, reports_run=False,
         note="fake verifier/exec.py, infrarsi/verifier/exec.py, controller/__init__.py"),
    Case("git_hook", "no effect: no hook written into the user's repo, none runs at the next prepare_source",
         _check_git_hook, note="post-checkout / pre-commit via the worktree's .git"),
    Case("detached_survivor", "no effect: no process of the job survives it; the next reference is not slowed",
         _check_survivor, note="3 setsid + double-forked busy loops"),
    Case("oversized_receipt", "rejected at L1 (receipt over its cap); bounded ingest memory; job.log capped",
         _check_oversized, note="300k update lines on the pipe, 50 MiB on stdout"),
    Case("binary_hunk", "refused at intake: binary", _check_binary, runs=False,
         note="GIT binary patch creating a .py file, alone and after '--- /dev/null'"),
    Case("symlink_escape", "refused before the run: symlink / outside the repo (patch and config knob); "
                           "outside files untouched",
         _check_symlink, runs=False, note="conf.json -> outside file as a config knob; edit under cfgdir -> outside"),
    Case("clock_forgery", "rejected at L5 (job clock 2x faster than the wrapper and executor clocks)",
         _check_clock, note="step_time_s and phases halved by the job"),
    Case("frozen_trap", "rejected at L2 frozen_files; the trusted wrapper neither hangs on nor reads the swapped file",
         _check_frozen_trap, note="a frozen file swapped for a link to /dev/zero during the run"),
)
CASE_NAMES: tuple[str, ...] = tuple(c.name for c in CASES)


def get_case(name: str) -> Case:
    """The case called ``name``; ValueError naming the known cases otherwise."""
    for c in CASES:
        if c.name == name:
            return c
    raise ValueError(f"unknown adversarial case {name!r} (known: {', '.join(CASE_NAMES)})")
