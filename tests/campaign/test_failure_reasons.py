"""Readable failure reasons (issue 16, item 7 and 8): a crash says the script's own exception line plus its log's
path (under torchrun the worker's error, not torchrun's ``ChildFailedError``); an OOM's shortfall is measured
against the process's own cap, never the whole GPU's free memory.

The torchrun log comes from a real ``torch.distributed.run`` with two CPU ranks; the receipts are signed the way
the wrapper signs them and ingested by :func:`build_ingest`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verifier"))
from verifier_receipts import N, WINDOW, receipt_dict  # noqa: E402

from infrarsi.controller.campaign.ingest import build_ingest  # noqa: E402
from infrarsi.controller.cli.campaign_cmd import short_reason, trial_dir_name  # noqa: E402
from infrarsi.controller.campaign.trialspec import trial_dirs  # noqa: E402
from infrarsi.controller.executors.classify import exception_line  # noqa: E402
from infrarsi.verifier.scan import parse_oom_detail  # noqa: E402
from infrarsi.controller.store.records import TrialRecord  # noqa: E402
from infrarsi.verifier import signing  # noqa: E402
from infrarsi.verifier.spec import JudgeSpec  # noqa: E402

MASTER = b"\x07" * 32
T0 = 1_800_000_000.0
SPEC = JudgeSpec(updates=N, window=WINDOW, tokens_per_update=256, seq_len=16, memory_cap_gib=40.0,
                 precision_menu=("fp32",), frozen_manifest={"f.py": "aa"}, static_invariants=())

#: PyTorch 2.11's allocator message under torch.cuda.set_per_process_memory_fraction (a 2 GiB cap on an H200 with
#: 137.79 GiB free), recorded on the device: 1.5 GiB held, 1 GiB requested
CAPPED_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity "
              "of 139.80 GiB of which 137.79 GiB is free. Including non-PyTorch memory, this process has 2.01 GiB "
              "memory in use. 2.00 GiB allowed; Of the allocated memory 1.50 GiB is allocated by PyTorch, and 0 bytes "
              "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
              "Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-"
              "cuda-alloc-conf)")
#: the same without a per-process cap (the contract's memory_cap_gib is the cap)
UNCAPPED_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                "of 79.19 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.00 GiB "
                "memory in use. Of the allocated memory 76.00 GiB is allocated by PyTorch, and 1.00 GiB is "
                "reserved by PyTorch but unallocated.")

SCRIPT = """\
import os
print("config", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")})
def check(batch):
    raise ValueError(f"micro_batch {batch} does not divide the global batch")
if os.environ.get("RANK") == "0":  # one rank fails: two tracebacks written at once interleave in the shared log
    check(3)
"""


def _trial(tmp_path: Path, key: str) -> TrialRecord:
    _, out = trial_dirs(tmp_path / "wd", key)
    out.mkdir(parents=True)
    return TrialRecord(id=1, campaign_id=1, seq=4, trial_key=key, stage="search", config={}, patches=[],
                       signature="s", group_key=None, status="finished", outcome="crash", reason="",
                       executor="local", job_id="12345", submit_time=T0, start_time=T0, end_time=T0 + 5.0, gpus=1,
                       partition=None, attempt=1, outdir=str(out))


def _receipt(t: TrialRecord, exit_code: int, errors: list[dict[str, Any]], oom: dict[str, Any] | None = None,
             updates: int = 3) -> None:
    d = receipt_dict(n=updates)
    d["footer"] = None
    d["wrapper"].update(exit_code=exit_code, errors=errors, oom=oom)
    d = dict(d, trial_id=t.trial_key)
    d["signature"] = signing.sign(d, signing.derive_trial_key(MASTER, t.trial_key))
    (Path(t.outdir) / "receipt.json").write_text(json.dumps(d))


def _ingest(t: TrialRecord, exec_outcome: str = "crash", exec_reason: str = "receipt: job ended with exit code 1",
            capacity: float | None = 80.0):
    return build_ingest(t, exec_outcome, exec_reason, t.start_time, t.end_time, MASTER, [], SPEC, devices=1,
                        capacity_gib=capacity)[0]


@pytest.fixture(scope="module")
def torchrun_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The combined output of a real 2-rank torchrun whose script raises ValueError on every rank."""
    d = tmp_path_factory.mktemp("torchrun")
    (d / "train.py").write_text(SCRIPT)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                        "--nproc-per-node=2", "train.py"], cwd=d, capture_output=True, text=True, timeout=180)
    text = r.stdout + r.stderr
    assert r.returncode != 0 and "ChildFailedError" in text, text[-2000:]
    return text


def test_a_crash_reason_is_the_exception_line_and_the_log_path(tmp_path: Path) -> None:
    t = _trial(tmp_path, "a" * 32)
    _receipt(t, 1, [{"kind": "traceback", "line": "Traceback (most recent call last):", "t": 1.0}])
    (Path(t.outdir) / "job.log").write_text(
        "step 1\nTraceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    main()\n"
        "  File \"train.py\", line 4, in main\n    assert cfg.compile in (True, False), cfg.compile\n"
        "           ^^^^^^^^^^^\nValueError: bad value for --compile: 'false'\n")
    ing = _ingest(t)
    assert ing.outcome == "crash"
    assert ing.reason == f"ValueError: bad value for --compile: 'false' (log: {t.outdir}/job.log)"
    assert "Traceback" not in ing.reason


def test_under_torchrun_the_reason_is_the_scripts_own_error(tmp_path: Path, torchrun_log: str) -> None:
    assert exception_line(torchrun_log) == "ValueError: micro_batch 3 does not divide the global batch"
    t = _trial(tmp_path, "b" * 32)
    _receipt(t, 1, [{"kind": "traceback", "line": "Traceback (most recent call last):", "t": 1.0}])
    (Path(t.outdir) / "job.log").write_text(torchrun_log)
    ing = _ingest(t)
    assert ing.reason.startswith("ValueError: micro_batch 3 does not divide the global batch (log: ")
    assert "ChildFailedError" not in ing.reason


def test_rank_prefixes_and_chained_exceptions() -> None:
    log = ("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"t.py\", line 2, in <module>\n"
           "[rank1]: KeyError: 'lr'\n\nDuring handling of the above exception, another exception occurred:\n\n"
           "Traceback (most recent call last):\n  File \"t.py\", line 4, in <module>\n"
           "RuntimeError: config incomplete\n")
    assert exception_line(log) == "RuntimeError: config incomplete"
    assert exception_line("just a line\n") is None


def test_no_traceback_gives_the_exit_status_and_the_last_log_line(tmp_path: Path) -> None:
    t = _trial(tmp_path, "c" * 32)
    _receipt(t, 2, [])
    (Path(t.outdir) / "job.log").write_text("usage: train.py [-h]\ntrain.py: error: unrecognized arguments: --zz\n")
    ing = _ingest(t, exec_reason="receipt: job ended with exit code 2")
    assert ing.reason == ("receipt: job ended with exit code 2; last log line: train.py: error: unrecognized "
                          f"arguments: --zz (log: {t.outdir}/job.log)")


def test_no_receipt_still_names_the_exception_and_the_log(tmp_path: Path) -> None:
    t = _trial(tmp_path, "d" * 32)
    (Path(t.outdir) / "job.log").write_text("Traceback (most recent call last):\n  File \"x\", line 1\n"
                                             "ImportError: cannot import name 'flash_attn'\n")
    ing = _ingest(t, exec_reason="no receipt: the wrapper never wrote receipt.json (state EXITED, exit 1)")
    assert ing.reason.startswith("ImportError: cannot import name 'flash_attn' (log: ")


def test_oom_shortfall_is_against_the_process_cap_not_the_gpus_free_memory(tmp_path: Path) -> None:
    t = _trial(tmp_path, "e" * 32)
    _receipt(t, 1, [{"kind": "oom", "line": CAPPED_OOM[:500], "t": 1.0}],
             oom={"requested_gib": 1.0, "free_gib": 137.79})
    (Path(t.outdir) / "job.log").write_text(f"step 1\nTraceback (most recent call last):\n  File \"x\"\n{CAPPED_OOM}\n")
    ing = _ingest(t, exec_outcome="oom", capacity=80.0)
    assert ing.outcome == "oom" and ing.censor_kind == "oom"
    # held 1.50 GiB, requested 1 GiB, 2 GiB allowed: short by 0.5 GiB (not 1 - 137.79 -> 0.0)
    assert ing.oom_shortfall_gib == pytest.approx(0.5, abs=1e-6)
    assert "process's own cap of 2.00 GiB" in ing.reason and "short by 0.50 GiB" in ing.reason
    assert "{" not in ing.reason and ing.reason.endswith(f"(log: {t.outdir}/job.log)")
    assert ing.details["oom"]["cap_source"] == "the process's own cap"


def test_oom_without_a_process_cap_uses_the_contracts_memory_cap(tmp_path: Path) -> None:
    t = _trial(tmp_path, "f" * 32)
    _receipt(t, 1, [{"kind": "oom", "line": UNCAPPED_OOM, "t": 1.0}], oom={"requested_gib": 2.0, "free_gib": 1.1})
    ing = _ingest(t, exec_outcome="oom", capacity=70.0)
    # 78 GiB in use + 2 GiB requested against memory_cap_gib 70: short by 10 GiB
    assert ing.oom_shortfall_gib == pytest.approx(10.0)
    assert "contract memory_cap_gib of 70.00 GiB" in ing.reason


def test_oom_parser_reads_the_older_message_format() -> None:
    d = parse_oom_detail("RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total "
                         "capacity; 130.35 MiB already allocated; 47.06 MiB free; 2.00 GiB allowed; 188.00 MiB "
                         "reserved in total by PyTorch)")
    assert d["allowed_gib"] == 2.0 and d["total_gib"] == 7.93
    assert d["reserved_gib"] == pytest.approx(188 / 1024) and d["requested_gib"] == pytest.approx(36 / 1024)


def test_campaign_show_names_trials_by_their_directory(tmp_path: Path) -> None:
    key = "0123456789abcdef" + "f" * 16
    src, out = trial_dirs(tmp_path, key)
    assert trial_dir_name(key) == src.parent.name == out.parent.name == key[:16]
    assert short_reason("ValueError: x (log: /w/trials/0123/out/job.log)") == "ValueError: x"
    assert short_reason("y" * 300).endswith("...") and len(short_reason("y" * 300)) == 120
