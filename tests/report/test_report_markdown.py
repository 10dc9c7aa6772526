"""REPORT.md rendering: headline numbers, formula, every section, tables, and null-safety."""

from __future__ import annotations

from infrarsi.verifier.judge import INVARIANTS

import re
from typing import Any

import pytest

from infrarsi.controller.report import render_report
from infrarsi.controller.report.markdown import SECTIONS, rejections_by_layer


def _section(md: str, heading: str) -> str:
    """The text of one ``## `` section (heading excluded)."""
    start = md.index(heading + "\n") + len(heading) + 1
    nxt = md.find("\n## ", start)
    return md[start:] if nxt < 0 else md[start:nxt]


def _table_rows(block: str) -> list[list[str]]:
    """Cells of every Markdown table row in ``block`` (separator rows dropped)."""
    rows = []
    for line in block.splitlines():
        if line.startswith("| ") and not re.fullmatch(r"\|[\s\-:|]+\|", line):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def _assert_aligned(md: str) -> None:
    """Every table's lines have the same length (columns padded) and the same number of cells."""
    for block in re.findall(r"(?:^\|.*\|$\n?)+", md, flags=re.M):
        lines = block.strip("\n").splitlines()
        assert len({len(x) for x in lines}) == 1, block
        assert len({len(re.split(r"(?<!\\)\|", x)) for x in lines}) == 1, block


@pytest.mark.parametrize("name", ["promoted_result", "null_result", "rejected_result"])
def test_every_section_in_order_and_tables_aligned(name: str, request: pytest.FixtureRequest) -> None:
    md = render_report(request.getfixturevalue(name))
    positions = [md.index(h + "\n") for h in SECTIONS]
    assert positions == sorted(positions)
    assert md.startswith("# infrarsi report: nanogpt-tiny (campaign #7)")
    assert "progress.png" in _section(md, "## Progress plot")
    assert "None" not in md.replace("None:", "")  # no Python None leaks into the text
    assert "nan" not in md.lower().split()
    _assert_aligned(md)


def test_promoted_headline_mfu_formula_and_diff(promoted_result: dict[str, Any]) -> None:
    r = promoted_result
    md = render_report(r)
    head = md.split("## Result")[0]
    assert f"Delivered speedup: {r['delivered_speedup']:.2f}x" in head
    before, after = r["mfu"]["before"], r["mfu"]["after"]
    assert f"MFU {100 * before:.1f}% → {100 * after:.1f}%" in head
    mfu = _section(md, "## Speedup and MFU")
    assert "6 × active matrix parameters" in mfu and "attention FLOPs" in mfu and "BF16 peak" in mfu
    assert r["mfu"]["formula"] in mfu
    assert ["FLOPs per token", f"{r['mfu']['flops_per_token']:.3e}"] in _table_rows(mfu)
    promoted = _section(md, "## Promoted configuration")
    assert ["micro_batch", "1", "16"] in _table_rows(promoted)
    assert "```diff\n" + r["promoted"]["diff"].rstrip("\n") + "\n```" in promoted
    verdicts = _section(md, "## Verifier verdicts")
    inv_rows = [row for row in _table_rows(verdicts) if len(row) == 5 and row[0] != "Layer"]
    assert len(inv_rows) == 17
    assert ["L5", "resume_continues", "no", "unchecked", "checked resume_continues"] in inv_rows
    assert "16/17 invariants pass" in verdicts
    assert "judges every trial on 17 invariants" in verdicts
    assert "Trial isolation (exec wrapper sandbox): bwrap 6." in verdicts and "WARNING" not in md
    noise = _section(md, "## Noise calibration")
    assert "0.0030" in noise and "0.60%" in noise
    mem = _table_rows(_section(md, "## Memory model"))
    # measured settings only, with their evidence (issue 16): micro_batch=16 ran twice with a peak reported;
    # activation_checkpointing never ran, so it gets no number (and is not called neutral)
    assert mem[1][:3] == ["micro_batch", "16", "0.40"] and mem[1][5:] == ["2 measured", "medium"] and len(mem) == 2
    assert "Never run, so not estimated: activation_checkpointing=True." in _section(md, "## Memory model")
    pairs = _table_rows(_section(md, "## Promotion re-runs"))
    assert pairs[1][:3] == ["deadbeef:0", "5", "6"] and pairs[1][5] == f"{0.21 / 0.1141:.3f}x"


def test_one_x_states_the_reason_at_the_top_with_nulls(null_result: dict[str, Any]) -> None:
    md = render_report(null_result)
    first = md.splitlines()[2]
    assert "1.00x" in first and "Nothing was promoted" in first and null_result["reason"] in first
    assert "MFU not computed" in _section(md, "## Speedup and MFU")
    assert "No memory data" in _section(md, "## Memory model")
    assert "None: every offered patch passed intake" in _section(md, "## Refused patches")
    assert "No promotion re-runs" in _section(md, "## Promotion re-runs")
    cost = _table_rows(_section(md, "## Cost ledger"))
    assert cost[1] == ["Total", "—", "—"]
    assert '"micro_batch": 1' in _section(md, "## Promoted configuration")  # the reference config stays


def test_rejected_trials_listed_with_layer_and_counted(rejected_result: dict[str, Any]) -> None:
    r = rejected_result
    md = render_report(r)
    rows = {row[0]: row for row in _table_rows(_section(md, "## Trials"))[1:]}
    rejected = [t for t in r["trials"] if t["outcome"] == "rejected"]
    assert len(rejected) == 2
    for t in rejected:
        row = rows[str(t["seq"])]
        assert row[4] == "rejected"
        assert row[-1].startswith(f"{t['first_failed_layer']}: ") and t["reason"][:20] in row[-1]
    ooms = [t for t in r["trials"] if t["outcome"] == "oom"]
    assert all(rows[str(t["seq"])][4] == "oom" and rows[str(t["seq"])][5] == "—" for t in ooms)
    assert "2 ok, 2 rejected, 2 oom, 1 crash, 1 timeout" in _section(md, "## Trials")
    layers = {row[0]: row[2] for row in _table_rows(_section(md, "## Verifier verdicts")) if len(row) == 3}
    assert layers["L2"] == "1" and layers["L4"] == "1" and layers["L1"] == "0" and layers["total"] == "2"
    refused = _section(md, "## Refused patches")
    assert "`touch_data.diff`" in refused and "data.py \\| loader" in refused  # pipe escaped, table intact
    cost = {row[0]: row for row in _table_rows(_section(md, "## Cost ledger"))}
    total = r["cost"]["total_gpu_hours"]
    assert cost["rejected by the verifier"][2] == f"{100 * r['cost']['rejected_gpu_hours'] / total:.1f}%"
    assert cost["Share of budget used"][1] == f"{100 * r['cost']['share_of_budget']:.1f}%"
    assert any(row[:2] == ["search", "oom"] for row in _table_rows(_section(md, "## Cost ledger")))


def test_rejections_counted_from_trials_when_engine_gave_none(rejected_result: dict[str, Any]) -> None:
    rejected_result["rejections_by_layer"] = None
    counts = rejections_by_layer(rejected_result)
    assert counts["L2"] == 1 and counts["L4"] == 1 and sum(counts.values()) == 2


def test_mfu_computed_from_inputs_when_engine_left_it_null(promoted_result: dict[str, Any]) -> None:
    m = promoted_result["mfu"]
    want_before, want_after = m["before"], m["after"]
    m["before"] = m["after"] = None
    md = render_report(promoted_result)
    rows = dict(r for r in _table_rows(_section(md, "## Speedup and MFU")) if len(r) == 2)
    assert rows["MFU before"] == f"{100 * want_before:.1f}%"
    assert rows["MFU after"] == f"{100 * want_after:.1f}%"


def test_trials_without_isolation_get_a_loud_line_at_the_top(rejected_result: dict[str, Any]) -> None:
    """A trial whose wrapper ran with isolation mode "none" is flagged in the headline and the verdicts."""
    rejected_result["trials"][1]["isolation"] = "none"
    rejected_result["trials"][2]["isolation"] = None          # a receipt from before the sandbox existed
    md = render_report(rejected_result)
    head = md.split("## Result")[0]
    assert "**WARNING: 1 trial(s) ran WITHOUT isolation" in head
    verdicts = _section(md, "## Verifier verdicts")
    assert "Trial isolation (exec wrapper sandbox): bwrap 6, none 1, unknown 1." in verdicts
    assert "WITHOUT isolation" in verdicts
    del rejected_result["invariant_count"]                    # an older result.json: the verifier's own count
    assert f"judges every trial on {len(INVARIANTS)} invariants" in render_report(rejected_result)


def test_minimal_and_failed_results_render() -> None:
    md = render_report({"schema": "infrarsi.result/1", "delivered_speedup": None, "campaign": {"state": "failed"}})
    assert "No speedup delivered (campaign state: failed)" in md.splitlines()[2]
    assert all(h in md for h in SECTIONS)
    assert "0 trials" in md
    with pytest.raises(TypeError):
        render_report([])  # type: ignore[arg-type]


def test_failures_grouped_by_kind_with_what_the_ledger_concluded(rejected_result: dict[str, Any]) -> None:
    """Two crashes whose errors differ only in addresses, ranks and trial log paths are one kind; the other
    failures each their own; the ledger's bans, requirements and banned patches are listed."""
    r = rejected_result
    crash = next(t for t in r["trials"] if t["outcome"] == "crash")
    r["trials"] += [dict(crash, seq=9, reason="RuntimeError: bad ptr 0x7f00 on rank 3 "
                                               "(log: /srv/x/trials/0123456789abcdef/out/job.log)"),
                    dict(crash, seq=10, reason="RuntimeError: bad ptr 0x7e11 on rank 5 "
                                                "(log: /srv/x/trials/fedcba9876543210/out/job.log)")]
    r["search"] = {"banned_tuples": [["dtype=bf16", "micro_batch=32"]], "requirements": [["fp8=1", "compile=1"]],
                   "excluded": ["micro_batch=64"], "banned_patches": {"bad.diff": "crash"}}
    sec = _section(render_report(r), "## Failures")
    rows = _table_rows(sec)
    assert rows[0] == ["Kind", "Trials", "Error (first trial)"]
    assert [row[1] for row in rows[1:]] == ["#2", "#5", "#6", "#7", "#9, #10"]
    assert [row[0] for row in rows[1:]] == ["rejected", "rejected", "crash", "timeout", "crash"]
    assert rows[1][2].startswith("L2: update 1")
    assert "6 search trials failed in 5 ways" in sec
    assert "never run together: dtype=bf16 & micro_batch=32" in sec
    assert "fp8=1 runs only beside compile=1" in sec and "micro_batch=64 excluded" in sec
    assert "patch bad.diff banned (crash)" in sec
    _assert_aligned(sec)


def test_a_campaign_without_failures_says_so(promoted_result: dict[str, Any]) -> None:
    promoted_result["trials"] = [t for t in promoted_result["trials"] if t["outcome"] in ("ok", "oom")]
    sec = _section(render_report(promoted_result), "## Failures")
    assert "No search trial crashed or was rejected." in sec and "|" not in sec
