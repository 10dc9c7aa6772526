"""REPORT.md accounting and honesty (issue 16, item 8): CPU campaigns are costed in CPU-hours and show no MFU;
finished campaigns read "done"; the memory table shows numbers only for measured settings, with their evidence;
failure reasons are readable (no raw JSON, the log named by its trial directory)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from infrarsi.controller.report.markdown import render_report
from infrarsi.controller.report.plot import plot_progress
from infrarsi.controller.report.sections import memory_section, readable_reason

from tests.report.conftest import make_promoted_result, make_rejected_result


def _section(md: str, heading: str) -> str:
    start = md.index(heading)
    nxt = md.find("\n## ", start + 1)
    return md[start:] if nxt < 0 else md[start:nxt]


def _rows(section: str) -> list[list[str]]:
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in section.splitlines()
            if ln.startswith("|") and not set(ln) <= set("|-: ")]


def _cpu_result() -> dict[str, Any]:
    """The promoted fixture as a CPU campaign: its hours booked as CPU-hours, a stale MFU block present."""
    r = make_promoted_result()
    r["campaign"]["device"] = "cpu"
    r["campaign"]["state"] = "report"  # the report is written in the report stage, right before done
    for t in r["trials"]:
        t["cpu_hours"], t["gpu_hours"] = t["gpu_hours"], 0.0
        t["cum_hours"], t["cum_gpu_hours"] = t["cum_gpu_hours"], 0.0
    cost = r["cost"]
    cost.update(unit="CPU", total_cpu_hours=cost["total_gpu_hours"], failed_cpu_hours=cost["failed_gpu_hours"],
                rejected_cpu_hours=cost["rejected_gpu_hours"], total_gpu_hours=0.0, failed_gpu_hours=0.0,
                rejected_gpu_hours=0.0)
    for s in cost["by_stage"]:
        s["cpu_hours"], s["gpu_hours"] = s["gpu_hours"], 0.0
    r["mfu_omitted"] = "CPU trials: there is no GPU peak to measure MFU against"
    return r


def test_a_cpu_campaign_is_costed_in_cpu_hours_without_mfu(tmp_path: Path) -> None:
    r = _cpu_result()
    md = render_report(r)
    head = md.split("## Result")[0]
    assert f"cost {r['cost']['total_cpu_hours']:.4f} CPU-h" in head and "GPU-h" not in head
    assert "MFU not computed (CPU trials" in head and not re.search(r"MFU \d", md)
    mfu = _section(md, "## Speedup and MFU")
    assert "MFU not computed: CPU trials: there is no GPU peak" in mfu and "989" not in mfu and "%" not in mfu
    cost = _section(md, "## Cost ledger")
    assert "booked as CPU-hours" in cost and _rows(cost)[0][:2] == ["CPU-hours", "CPU-h"]
    assert _rows(cost)[1] == ["Total", f"{r['cost']['total_cpu_hours']:.4f}", "100.0%"]
    result = dict(_rows(_section(md, "## Result")))
    assert result["CPU-hours spent (share of budget)"].startswith(f"{r['cost']['total_cpu_hours']:.4f}")
    assert result["MFU before → after"].startswith("not computed")
    assert result["Campaign"].endswith("state done")  # never "state report"
    assert plot_progress(r, tmp_path / "p.png").stat().st_size > 0


def test_a_gpu_campaign_keeps_gpu_hours_and_mfu() -> None:
    md = render_report(make_promoted_result())
    assert "cost " in md and " GPU-h (" in md.split("## Result")[0] and "MFU 0." not in md
    assert re.search(r"MFU \d+\.\d% → \d+\.\d%", md)
    assert "booked as GPU-hours" in _section(md, "## Cost ledger")


def test_memory_table_never_blames_a_knob_from_one_oom_nor_calls_an_unrun_value_neutral() -> None:
    r = make_rejected_result()  # micro_batch 64 and 32 only ever ran out of memory; bf16 ran (peak reported)
    r["memory_table"] = [
        {"name": "micro_batch", "value": 64, "gib": 1.86, "sd": 0.9, "class": "spender"},
        {"name": "dtype", "value": "bf16", "gib": -0.2, "sd": 0.5, "class": "saver"},
        {"name": "micro_batch", "value": 8, "gib": 0.0, "sd": 2.0, "class": "neutral"},
    ]
    sec = memory_section(r)
    rows = {(row[0], row[1]): row for row in _rows(sec)[1:]}
    assert rows[("micro_batch", "64")][2:] == ["—", "—", "ran out of memory", "0 measured, 1 OOM",
                                               "none (no run with it completed)"]
    assert "1.86" not in sec
    assert rows[("dtype", "bf16")][2:] == ["-0.20", "±0.50", "within noise", "1 measured", "low"]
    assert ("micro_batch", "8") not in rows and "neutral" not in sec
    assert "Never run, so not estimated: micro_batch=8." in sec


def test_no_measured_memory_means_no_table_of_zeros() -> None:
    r = _cpu_result()
    for t in r["trials"]:
        t["peak_mem_gib"] = None
    r["memory_table"] = [{"name": "micro_batch", "value": 16, "gib": 0.0, "sd": 0.0, "class": "neutral"}]
    sec = memory_section(r)
    assert "No memory data: no trial reported peak memory (CPU trials)" in sec and "|" not in sec


def test_reasons_are_readable() -> None:
    oom = ("out of memory: needed 40.27 GiB (held 39.77 + requested 0.50) against the process's own cap of 40.00 "
           "GiB, short by 0.27 GiB (log: /scratch/infrarsi/gpt-1a2b3c4d/trials/0123456789abcdef/out/job.log)")
    assert readable_reason(oom) == ("out of memory: needed 40.27 GiB (held 39.77 + requested 0.50) against the "
                                    "process's own cap of 40.00 GiB, short by 0.27 GiB "
                                    "(log: trials/0123456789abcdef/out/job.log)")
    raw = 'L1 no_errors: nccl line: {"config": {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "batch_size": 12, "x": 1'
    blob = raw[len("L1 no_errors: nccl line: "):]
    assert readable_reason(raw) == f"L1 no_errors: nccl line: {{JSON, {len(blob)} chars}}"
    long = "ValueError: " + "x" * 400 + " (log: /w/trials/fedcba9876543210/out/job.log)"
    out = readable_reason(long)
    assert out.endswith("(log: trials/fedcba9876543210/out/job.log)") and len(out) <= 200
