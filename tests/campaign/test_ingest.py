"""``controller/campaign/ingest.build_ingest`` on real signed receipts in a trial's out directory.

Outcomes: accepted, rejected with the first failed layer, oversized (never read into memory: peak RSS measured
in a subprocess), forged clock (executor_clock), unsigned, over the wrapper's limits; then the same trials
ingested into a real PostgreSQL store and re-judged the way ``infrarsi verify --rejudge`` does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verifier"))
from verifier_receipts import N, WINDOW, receipt_dict  # noqa: E402

from infrarsi.controller.campaign.ingest import build_ingest  # noqa: E402
from infrarsi.controller.store.records import TrialRecord  # noqa: E402
from infrarsi.controller.store.stage_records import Scope  # noqa: E402
from infrarsi.verifier import signing  # noqa: E402
from infrarsi.verifier.receipt import MAX_RECEIPT_BYTES, Receipt, load_receipt  # noqa: E402
from infrarsi.verifier.spec import JudgeSpec  # noqa: E402

MASTER = b"\x05" * 32
T0 = 1_800_000_000.0
SPEC = JudgeSpec(updates=N, window=WINDOW, tokens_per_update=256, seq_len=16, memory_cap_gib=1.0,
                 precision_menu=("fp32", "bf16"), frozen_manifest={"f.py": "aa"}, static_invariants=("global_batch",))


def _sign(d: dict[str, Any], trial_id: str) -> dict[str, Any]:
    d = dict(d, trial_id=trial_id)
    d["signature"] = signing.sign(d, signing.derive_trial_key(MASTER, trial_id))
    return d


def _timed(**kw: Any) -> dict[str, Any]:
    """An honest new-wrapper receipt: its wall clock ran 3.2 s from T0 + 1 (executor window T0 .. T0 + 5)."""
    d = receipt_dict(**kw)
    d["wrapper"]["clock"] = {"start_unix": T0 + 1.0, "end_unix": T0 + 1.0 + d["wrapper"]["wall_s"]}
    d["wrapper"]["isolation"] = {"mode": "bwrap", "detail": "bwrap 0.8.0"}
    d["wrapper"]["limits"] = {"max_receipt_lines": N + 16, "max_receipt_bytes": (N + 16) * 65536,
                              "receipt_lines_dropped": 0, "receipt_bytes_dropped": 0, "log_bytes_dropped": 0,
                              "disk_limit_bytes": None, "disk_used_bytes": 4096, "disk_exceeded": False}
    return d


def _trial(tmp_path: Path, key: str, stage: str = "search", start: float | None = T0,
           end: float | None = T0 + 5.0) -> TrialRecord:
    out = tmp_path / key / "out"
    out.mkdir(parents=True)
    return TrialRecord(id=1, campaign_id=1, seq=1, trial_key=key, stage=stage, config={}, patches=[], signature="s",
                       group_key=None, status="finished", outcome="ok", reason="", executor="local", job_id="1",
                       submit_time=start, start_time=start, end_time=end, gpus=1, partition=None, attempt=1,
                       outdir=str(out))


def _write(t: TrialRecord, d: dict[str, Any] | bytes) -> None:
    (Path(t.outdir) / "receipt.json").write_bytes(d if isinstance(d, bytes) else json.dumps(d).encode())


def _refs() -> list[Receipt]:
    return [Receipt.from_dict(_sign(_timed(), "ref"))]


def _ingest(t: TrialRecord, refs: list[Receipt] | None = None, **kw: Any):
    return build_ingest(t, "ok", "", t.start_time, t.end_time, MASTER, _refs() if refs is None else refs, SPEC,
                        devices=1, capacity_gib=80.0, **kw)


def test_honest_trial_is_accepted_with_17_verdicts_and_isolation_recorded(tmp_path):
    t = _trial(tmp_path, "ok1")
    _write(t, _sign(_timed(seed=1), "ok1"))
    ing, rec = _ingest(t)
    assert ing.outcome == "ok" and ing.accepted and ing.signature_ok and rec is not None, ing.reason
    assert len(ing.verdicts) == 18 and {v.invariant for v in ing.verdicts} >= {"executor_clock", "params_match"}
    assert next(v for v in ing.verdicts if v.invariant == "executor_clock").status == "pass"
    assert ing.details["isolation"] == {"mode": "bwrap", "detail": "bwrap 0.8.0"}
    assert ing.start_time == T0 and ing.gpu_seconds == pytest.approx(5.0)


def test_rejected_trial_names_its_first_failed_layer(tmp_path):
    t = _trial(tmp_path, "bad")
    d = _timed(seed=1)
    d["header"]["model_digest"] = "z" * 64
    d["updates"][0]["lr"] = 9.0
    _write(t, _sign(d, "bad"))
    ing, _ = _ingest(t)
    assert ing.outcome == "rejected" and not ing.accepted and ing.first_failed_layer == "L2"
    assert ing.reason.startswith("L2 same_model: model digest")


def test_forged_clock_is_rejected_at_l5(tmp_path):
    """Attack: the receipt, re-signed with the trial key, claims its 3.2 s ran 60 s after the executor saw the
    job start (the executor window is 100 s: 95 s the receipt cannot account for)."""
    t = _trial(tmp_path, "clk", end=T0 + 100.0)
    d = _timed(seed=1)
    d["wrapper"]["clock"] = {"start_unix": T0 + 60.0, "end_unix": T0 + 63.2}
    _write(t, _sign(d, "clk"))
    ing, _ = _ingest(t)
    assert ing.outcome == "rejected" and ing.first_failed_layer == "L5"
    assert ing.reason.startswith("L5 executor_clock: the executor saw 100.0 s but the receipt accounts for 3.2 s")


def test_unsigned_and_replayed_receipts_are_rejected_at_l0(tmp_path):
    t = _trial(tmp_path, "uns")
    _write(t, _timed(seed=1))
    ing, rec = _ingest(t)
    assert (ing.outcome, ing.first_failed_layer, rec) == ("rejected", "L0", None)
    assert ing.reason.startswith("L0 signature: unsigned") and not ing.signature_ok
    t2 = _trial(tmp_path, "rep")
    _write(t2, _sign(_timed(seed=1), "another-trial"))
    assert _ingest(t2)[0].reason.startswith("L0 signature: replayed")


def test_receipt_over_the_wrappers_limits_is_rejected_at_l1_not_a_crash(tmp_path):
    """The wrapper dropped lines past its cap (the footer with them), so the run would classify as a crash;
    ingest rejects it at L1 with the reason instead."""
    t = _trial(tmp_path, "flood")
    d = _timed(seed=1)
    d["footer"] = None
    d["wrapper"]["limits"].update(receipt_lines_dropped=299_987, receipt_bytes_dropped=29_000_000)
    _write(t, _sign(d, "flood"))
    ing, _ = _ingest(t)
    assert ing.outcome == "rejected" and ing.first_failed_layer == "L1"
    assert ing.reason.startswith("L1 completes: receipt over its limit: 300000 receipt lines for 12 updates")


def test_no_receipt_keeps_the_executors_reason(tmp_path):
    t = _trial(tmp_path, "none")
    ing, rec = build_ingest(t, "timeout", "TIMEOUT [job 1]", T0, T0 + 5, MASTER, [], SPEC, 1, 80.0)
    assert (ing.outcome, ing.reason, ing.receipt_raw, rec) == ("timeout", "TIMEOUT [job 1]", None, None)


def test_oversized_receipt_is_a_small_marker_and_an_l0_rejection(tmp_path):
    t = _trial(tmp_path, "big")
    d = _sign(_timed(seed=1), "big")
    raw = json.dumps(d).encode()
    _write(t, raw)
    ing, _ = _ingest(t, max_receipt_bytes=len(raw) - 1)
    assert ing.outcome == "rejected" and ing.first_failed_layer == "L0"
    assert ing.reason == f"L0 signature: oversized: {len(raw)} bytes > cap {len(raw) - 1} bytes"
    assert len(ing.receipt_raw) < 200
    with pytest.raises(Exception, match=f"^oversized: {len(raw)} bytes"):   # re-judging the stored marker agrees
        load_receipt(ing.receipt_raw, MASTER, "big")


RSS_PROBE = """
import json, resource, sys
from infrarsi.controller.campaign.ingest import build_ingest
from infrarsi.controller.store.records import TrialRecord
from infrarsi.verifier.spec import JudgeSpec
t = TrialRecord(id=1, campaign_id=1, seq=1, trial_key="huge", stage="search", config={}, patches=[], signature="s",
                group_key=None, status="finished", outcome="ok", reason="", executor="local", job_id="1",
                submit_time=0.0, start_time=0.0, end_time=10.0, gpus=1, partition=None, attempt=1, outdir=sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ing, _ = build_ingest(t, "ok", "", 0.0, 10.0, b"k" * 32, [], JudgeSpec(updates=20, window=(5, 20)), 1, 80.0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kib": before, "after_kib": after, "outcome": ing.outcome, "reason": ing.reason,
                  "stored": len(ing.receipt_raw)}))
"""


def test_a_100mb_receipt_never_enters_the_controllers_memory(tmp_path):
    """Attack: a 100 MB receipt.json (300k update lines of JSON).  Peak RSS of the ingesting process is
    measured with resource.getrusage: it grows by less than 20 MiB (reading it would cost >= 100 MiB)."""
    out = tmp_path / "huge" / "out"
    out.mkdir(parents=True)
    line = b'{"index": 1, "loss": 1.0, "grad_norm": 1.0, "tokens": 256, "pad": "' + b"x" * 260 + b'"},\n'
    with open(out / "receipt.json", "wb") as fh:
        fh.write(b'{"schema": "infrarsi.receipt/1", "trial_id": "huge", "updates": [\n')
        block = line * 10_000
        while fh.tell() < 100 * 1024 * 1024:
            fh.write(block)
        fh.write(b'{}], "wrapper": {}, "signature": "00"}\n')
    size = (out / "receipt.json").stat().st_size
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(RSS_PROBE), str(out)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["outcome"] == "rejected"
    assert r["reason"] == f"L0 signature: oversized: {size} bytes > cap {MAX_RECEIPT_BYTES} bytes"
    assert r["stored"] < 200
    assert r["after_kib"] - r["before_kib"] < 20 * 1024, r


@pytest.mark.postgres
def test_ingested_trials_rejudge_alike_from_a_real_store(tmp_path, pg_url):
    """Ingest into PostgreSQL, then re-judge from the store (stored executor times included): same verdicts."""
    from infrarsi.controller.cli.verify_cmd import stored_entries
    from infrarsi.controller.store import open_store
    from infrarsi.verifier.judge import rejudge

    store = open_store(pg_url, auto_upgrade=True)
    c = store.create_campaign(name="c", owner="o", contract_path="/c", contract_yaml="y", contract_digest="d" * 64,
                              repo_path="/r", workdir=str(tmp_path), executor="local", partition=None,
                              budget_gpu_hours=1.0, budget_trials=10, seed=0,
                              scope=Scope(commit="0" * 40, judge_spec=SPEC.to_dict()).dump())
    forged = _timed(seed=1)
    forged["wrapper"]["clock"] = {"start_unix": T0 + 60.0, "end_unix": T0 + 63.2}
    cases = [("ref", "reference", _sign(_timed(), "ref"), T0 + 5.0), ("good", "search", _sign(_timed(seed=1), "good"),
             T0 + 5.0), ("forged", "search", _sign(forged, "forged"), T0 + 100.0)]
    refs: list[Receipt] = []
    online = {}
    for key, stage, d, end in cases:
        rec = store.add_trial_intent(c.id, key, stage, {}, [], "sig-" + key, "local",
                                     str(tmp_path / key / "out"), 1, None)
        (tmp_path / key / "out").mkdir(parents=True)
        store.mark_submitted(rec.id, "1", T0)
        rec = store.mark_finished(rec.id, "ok", "", T0, end)
        _write(rec, d)
        ing, receipt = build_ingest(rec, "ok", "", rec.start_time, rec.end_time, MASTER, refs, SPEC, 1, 80.0)
        store.ingest(rec.id, ing)
        online[key] = ing.first_failed_layer
        if stage == "reference":
            refs.append(receipt)
    assert online == {"ref": None, "good": None, "forged": "L5"}
    entries, _ = stored_entries(c.id, store=store)
    assert {e[0]: e[4] for e in entries} == {"ref": (T0, T0 + 5.0), "good": (T0, T0 + 5.0),
                                             "forged": (T0, T0 + 100.0)}
    counts = rejudge(entries, MASTER)
    assert (counts.total, counts.accepted, dict(counts.by_layer)) == (3, 2, {"L5": 1})
    assert counts.by_invariant["executor_clock"] == 1
