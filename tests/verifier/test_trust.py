"""Trust checks: receipts over the wrapper's limits (L1 completes) and the executor's independent clock (L5).

Each attack is performed for real where it can be: a receipt signed with the right trial key that forges its
timeline, and a real job under the real wrapper (``python -I -m infrarsi.verifier.exec``) emitting 300,000
update lines for a 20-update contract.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from verifier_receipts import receipt_dict
from infrarsi.verifier import signing, trust
from infrarsi.verifier.judge import INVARIANTS, judge, judge_raw, rejudge
from infrarsi.verifier.receipt import Receipt
from infrarsi.verifier.spec import JudgeSpec

MASTER = b"\x07" * 32
T0 = 1_800_000_000.0


def _signed(d: dict[str, Any], trial_id: str) -> bytes:
    """Sign ``d`` the way the wrapper does, with the right per-trial key (the attacker holds it)."""
    d = dict(d, trial_id=trial_id)
    d["signature"] = signing.sign(d, signing.derive_trial_key(MASTER, trial_id))
    return json.dumps(d).encode()


def _timed(start: float, wall_s: float, step: float = 0.1, scale: float = 1.0, **kw: Any) -> dict[str, Any]:
    """A clean receipt whose wrapper clock starts at ``start`` and runs ``wall_s``; stamps scaled by ``scale``."""
    d = receipt_dict(step=step, **kw)
    for u in d["updates"]:
        u["wall_t"] *= scale
    d["footer"]["wall_t"] *= scale
    d["header"]["wall_t"] *= scale
    d["wrapper"]["wall_s"] = wall_s
    d["wrapper"]["clock"] = {"start_unix": start, "end_unix": start + wall_s}
    return d


# ------------------------------------------------------------------ L1: limits
def _limits(**kw: Any) -> dict[str, Any]:
    lim = {"max_receipt_lines": 100, "max_receipt_bytes": 1 << 20, "receipt_lines_dropped": 0,
           "receipt_bytes_dropped": 0, "log_bytes_dropped": 0, "disk_limit_bytes": 20 << 30,
           "disk_used_bytes": 1 << 30, "disk_exceeded": False}
    lim.update(kw)
    return lim


@pytest.mark.parametrize("limits,reason", [
    (_limits(receipt_lines_dropped=299_986), "receipt over its limit: 300000 receipt lines for 12 updates"),
    (_limits(receipt_bytes_dropped=5000), "receipt over its limit: 5000 receipt bytes dropped"),
    (_limits(disk_exceeded=True, disk_used_bytes=int(25.1 * (1 << 30))),
     "trial scratch over its disk limit: 25.1 GiB > 20 GiB"),
])
def test_receipt_over_its_limits_is_rejected_at_l1(make, spec, limits, reason):
    v = judge(make(lambda d: d["wrapper"].update(limits=limits)), [make()], spec)
    assert not v.accepted and v.first_failed_layer == "L1"
    assert v.first_failed.name == "completes" and v.first_failed.reason.startswith(reason), v.summary()


def test_far_more_update_lines_than_the_contract_is_over_the_limit(make, spec):
    many = make(n=spec.updates + trust.update_slack(spec.updates) + 1)
    v = judge(many, [make()], spec)
    assert v.first_failed.reason == f"receipt over its limit: {len(many.updates)} update lines for 12 updates"
    one_extra = judge(make(n=spec.updates + 1), [make()], spec)   # within slack: the plain count message
    assert one_extra.first_failed.reason == "13 updates ran, 12 requested"


def test_receipts_within_limits_and_older_receipts_pass(make, spec):
    assert judge(make(lambda d: d["wrapper"].update(limits=_limits())), [make()], spec).accepted
    assert judge(make(), [make()], spec).accepted                       # no 'limits' at all (older wrapper)
    noisy = judge(make(lambda d: d["wrapper"].update(limits=_limits(log_bytes_dropped=123))), [make()], spec)
    assert noisy.accepted and "job log truncated (123 bytes dropped)" in noisy.items[0].reason
    odd = judge(make(lambda d: d["wrapper"].update(limits="garbage")), [make()], spec)
    assert odd.accepted


FLOOD = """
import json, os
fd = int(os.environ["INFRARSI_RECEIPT_FD"])
os.write(fd, (json.dumps({"kind": "header", "model_digest": "m", "params": 1, "seq_len": 16,
                          "tokens_per_update": 256}) + "\\n").encode())
line = '{"kind":"update","index":%d,"loss":1.0,"grad_norm":1.0,"tokens":256,"seq_len":16,"step_time_s":0.0001}\\n'
chunk = []
for i in range(1, 300001):
    chunk.append(line % i)
    if len(chunk) == 5000:
        os.write(fd, "".join(chunk).encode())
        chunk = []
os.write(fd, (json.dumps({"kind": "footer", "completed": 300000}) + "\\n").encode())
"""


@pytest.mark.parametrize("capped", [True, False], ids=["wrapper-line-cap", "no-line-cap"])
def test_a_real_job_flooding_300k_update_lines_is_rejected(tmp_path, capped):
    """Attack: the job writes 300,000 update lines for a 20-update contract through the real wrapper.

    With ``--max-updates 20`` the wrapper drops lines beyond its cap and L1 says so; without it the receipt
    grows past the byte cap and is refused before parsing (L0 ``oversized``)."""
    (tmp_path / "job.py").write_text(textwrap.dedent(FLOOD))
    key = tmp_path / "trial.key"
    signing.write_key_file(str(key), signing.derive_trial_key(MASTER, "flood"))
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-I", "-m", "infrarsi.verifier.exec", "--trial-id", "flood", "--out",
                           str(out), "--key-file", str(key), "--quiet", *(["--max-updates", "20"] if capped else []),
                           "--", sys.executable, str(tmp_path / "job.py")],
                          cwd=tmp_path, env=env, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    size = (out / "receipt.json").stat().st_size
    v = judge_raw((out / "receipt.json").read_bytes(), [], JudgeSpec(updates=20, window=(5, 20)), MASTER, "flood")
    assert not v.accepted
    first = v.first_failed
    if capped:       # header + 300,000 updates + footer; the wrapper kept 20 + 16 lines
        assert first.layer == "L1" and first.name == "completes", v.summary()
        assert first.reason == "receipt over its limit: 300002 receipt lines for 20 updates " \
                               "(299966 dropped at the wrapper's cap of 36)"
    else:
        assert size > trust.MAX_RECEIPT_BYTES
        assert first.layer == "L0" and first.reason == f"oversized: {size} bytes > cap {trust.MAX_RECEIPT_BYTES} bytes"


# ------------------------------------------------------------------ L5: executor_clock
def _clock(d: dict[str, Any], window: tuple[float, float] | None):
    return trust.executor_clock(Receipt.from_dict(d), window)


def test_honest_timeline_passes_and_judge_reports_17_items(make, spec):
    d = _timed(T0 + 1.0, 3.2)
    item = _clock(d, (T0, T0 + 5.0))
    assert item.status == "pass" and item.required, item.reason
    v = judge(Receipt.from_dict(d), [make()], spec, executor_window=(T0, T0 + 5.0))
    assert v.accepted and len(v.items) == len(INVARIANTS) and [(i.layer, i.name) for i in v.items] == list(INVARIANTS)
    clock = next(i for i in v.items if i.name == "executor_clock")
    assert clock.status == "pass"


def test_forged_timeline_claiming_10s_inside_a_100s_window_is_rejected(make, spec):
    """Attack: a receipt re-signed with the trial key claims a 10 s run; the executor saw 100 s."""
    forged = _timed(T0 + 45.0, 10.0)
    raw = _signed(forged, "t1")
    ref = _signed(receipt_dict(), "ref")
    v = judge_raw(raw, [ref], spec, MASTER, "t1", executor_window=(T0, T0 + 100.0))
    assert not v.accepted and v.first_failed_layer == "L5" and v.first_failed.name == "executor_clock"
    assert "the executor saw 100.0 s but the receipt accounts for 10.0 s" in v.summary()
    assert judge_raw(raw, [ref], spec, MASTER, "t1").accepted      # the same receipt without the executor's view


def test_receipt_claiming_a_2x_faster_run_than_the_executor_saw_is_rejected():
    """Attack: every stamp, wall_s and the wall clock halved and re-signed; the executor saw 200 s."""
    honest = _timed(T0 + 1.5, 197.0, step=16.0)
    assert _clock(honest, (T0, T0 + 200.0)).status == "pass"
    halved = _timed(T0 + 1.5, 98.5, step=16.0, scale=0.5)
    item = _clock(halved, (T0, T0 + 200.0))
    assert item.status == "fail" and "101.5 s unaccounted" in item.reason
    lazy = _timed(T0 + 1.5, 197.0, step=16.0, scale=0.5)      # wall_s halved, wall clock left as it was
    lazy["wrapper"]["wall_s"] = 98.5
    assert _clock(lazy, (T0, T0 + 200.0)).reason.startswith("the wrapper's wall clock spans 197.0 s")


@pytest.mark.parametrize("edit,fragment", [
    (lambda d: d["wrapper"]["clock"].update(start_unix=T0 - 60), "start 60.0 s before the executor"),
    (lambda d: d["wrapper"]["clock"].update(end_unix=T0 + 90), "end 86.0 s after the executor"),
    (lambda d: d["wrapper"].update(wall_s=40.0), "wall clock spans 3.2 s but its wall_s says 40.0 s"),
    (lambda d: d["updates"][-1].update(wall_t=30.0), "updates stamped up to 30.0 s"),
    (lambda d: [u.update(step_time_s=2.0) for u in d["updates"]], "step times sum to 24.0 s"),
    (lambda d: d["wrapper"]["clock"].update(start_unix="soon"), "not a number"),
])
def test_timelines_that_claim_more_than_the_executor_saw_fail(edit, fragment):
    d = _timed(T0 + 0.5, 3.2)
    edit(d)
    item = _clock(d, (T0, T0 + 4.0))
    assert item.status == "fail" and fragment in item.reason, item.reason


def test_executor_clock_unchecked_without_executor_times_or_wrapper_clock():
    d = _timed(T0 + 1.0, 3.2)
    for window in (None, (None, None), (T0, None), (T0 + 5, T0)):
        item = _clock(d, window)
        assert item.status == "unchecked" and not item.required
    old = receipt_dict()
    item = _clock(old, (T0, T0 + 5.0))
    assert item.status == "unchecked" and not item.required and "predates" in item.reason


def test_rejudge_rechecks_the_clock_with_stored_executor_times(spec):
    ref = _signed(receipt_dict(), "ref")
    forged = _signed(_timed(T0 + 45.0, 10.0), "f")
    honest = _signed(_timed(T0 + 1.0, 3.2, seed=1), "h")
    sd = spec.to_dict()
    c = rejudge([("f", forged, [ref], sd, (T0, T0 + 100.0)), ("h", honest, [ref], sd, (T0, T0 + 5.0)),
                 ("g", honest.replace(b'"h"', b'"g"'), [ref], sd)], MASTER)
    assert (c.total, c.accepted) == (3, 1)
    assert c.by_invariant["executor_clock"] == 1 and c.by_layer["L5"] == 1 and c.by_layer["L0"] == 1
    assert "executor_clock" in c.table()


def test_real_wrapper_run_agrees_with_the_executor_window(tmp_path):
    """Honest run: the wrapper's receipt, timed from outside like the local executor does, passes (when the
    wrapper records its wall clock; an older wrapper leaves the item unchecked and not required)."""
    (tmp_path / "job.py").write_text("import time\ntime.sleep(0.3)\n")
    out = tmp_path / "out"
    start = time.time()
    subprocess.run([sys.executable, "-I", "-m", "infrarsi.verifier.exec", "--trial-id", "c", "--out", str(out),
                    "--quiet", "--", sys.executable, str(tmp_path / "job.py")], cwd=tmp_path, check=True, timeout=120)
    end = time.time()
    rec = Receipt.from_dict(json.loads((out / "receipt.json").read_text()))
    item = trust.executor_clock(rec, (start, end))
    if "clock" in rec.wrapper:
        assert item.status == "pass", item.reason
        assert trust.executor_clock(rec, (start - 100.0, end)).status == "fail"   # 100 s it cannot account for
    else:
        assert item.status == "unchecked" and not item.required
