"""The ``report`` stage: result.json, pack.yaml, REPORT.md and progress.png beside each other.

``result.json`` (schema ``infrarsi.result/1``) is the single source the report, ``infrarsi apply`` and finance
tooling read; ``pack.yaml`` is the promoted launch configuration in a form a researcher can paste into a job
script.  Artifacts are written to ``<campaign workdir>/report/`` (atomically: temp file then rename).

Everything here is a function of :class:`ReportInputs`: the campaign record with its ``Result`` stage record, its
trials, observations and cost, the promoted candidate's verdicts, the proposers' section and what the report
shows of the search's state (:class:`SearchState`).  The engine collects them
(:meth:`~infrarsi.controller.campaign.engine.CampaignEngine.report_inputs`); nothing here reads the store.
:func:`build_result` is pure: the two things result.json holds that are not in the inputs, the promoted diff
(:func:`promoted_diff`, built in a scratch export of the repository) and the finishing time, are passed in by the
engine's report action.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from infrarsi.controller.campaign.budget import concurrency
from infrarsi.controller.contract.checks import complete_config
from infrarsi.controller.contract.launch import render_launch
from infrarsi.controller.contract.model import Contract, Launch
from infrarsi.controller.experience.doctor import carried_rules
from infrarsi.controller.store.records import CampaignRecord, ObservationRecord, TrialRecord, VerdictItem
from infrarsi.controller.store.stage_records import Result, Scope, as_scope, doctor_or_none, scope_or_none
from infrarsi.verifier.judge import INVARIANTS


@dataclass(frozen=True)
class SearchState:
    """What the report shows of the search (the controller rebuilt from the store): its memory model's table and
    its summary; ``error`` instead when it could not be rebuilt (a report never fails because of the model)."""

    memory_table: Sequence[Mapping[str, Any]] = ()
    summary: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def of(cls, build: Any) -> "SearchState":
        """The state of the controller ``build()`` returns, or the error it raised."""
        try:
            ctrl = build()
            return cls(memory_table=ctrl.memory_table(), summary=ctrl.state_summary())
        except Exception as exc:  # noqa: BLE001 - a report must not fail because the model cannot be rebuilt
            return cls(error=str(exc))


@dataclass(frozen=True)
class ReportInputs:
    """Everything the artifacts are built from (see the module docstring)."""

    campaign: CampaignRecord
    contract: Contract
    #: the contract's launch with ``infrarsi submit``'s sbatch options
    launch: Launch
    result: Result
    trials: Sequence[TrialRecord]
    observations: Mapping[int, ObservationRecord]
    cost_by_stage: Sequence[Mapping[str, Any]]
    #: the stored verdicts of the promoted candidate's last promotion run (empty when nothing was promoted)
    promoted_verdicts: Sequence[VerdictItem] = ()
    search: SearchState = field(default_factory=SearchState)
    #: result.json's ``proposers`` section (``campaign.proposing.proposers_result``)
    proposers: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


LAYERS = ("L0", "L1", "L2", "L3", "L4", "L5")
PEAK_FLOPS = float(os.environ.get("INFRARSI_PEAK_TFLOPS", "989.5")) * 1e12
MFU_FORMULA = ("MFU = (tokens per update / step time) x flops_per_token / (devices x peak); flops_per_token = "
               "6 x active matrix parameters + attention FLOPs (12 x n_layer x d_model x seq_len), "
               "peak = dense BF16 peak per GPU")


def flops_per_token_of(contract: Contract, header_extra: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """FLOPs per token for MFU and where it came from: the contract's ``workload.flops_per_token`` first, else the
    reference receipt header's ``extra.flops_per_token`` (``header_extra``, :attr:`Doctor.header_extra`);
    ``(None, None)`` when neither states it."""
    if contract.workload.flops_per_token:
        return float(contract.workload.flops_per_token), "contract (workload.flops_per_token)"
    fpt = header_extra.get("flops_per_token")
    try:
        value = float(fpt) if fpt is not None else None
    except (TypeError, ValueError):
        value = None
    return (value, "receipt header (extra.flops_per_token)") if value else (None, None)

def report_dir(c: CampaignRecord) -> Path:
    """Where a campaign's artifacts live."""
    return Path(c.workdir) / "report"


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _changed(ref: dict[str, Any], cfg: dict[str, Any]) -> dict[str, list[Any]]:
    return {k: [ref.get(k), v] for k, v in sorted(cfg.items()) if ref.get(k) != v}


def _changed_passed(contract: Contract, changed: dict[str, list[Any]]) -> dict[str, list[str]]:
    """``changed`` with each value as the job received it (``render``), for displays: ``compile: False→True``."""
    names = {k.name: k for k in contract.knobs}
    return {k: [names[k].rendered(v) if k in names else str(v) for v in pair] for k, pair in changed.items()}


def combined_diff(repo: Path, scope: Scope | dict[str, Any], patches: list[str]) -> str:
    """One unified diff of ``patches`` applied in order to the locked commit (paths relative to the target repo),
    so it applies in one ``git apply`` even when several patches touch the same file; files a patch creates are
    included.  Built in a scratch export with a private git directory (nothing is written to ``repo`` and none of
    its hooks, config or drivers run)."""
    from infrarsi.controller.campaign.scope import git
    from infrarsi.controller.campaign.sourcetree import scratch_tree
    from infrarsi.controller.patches.intake import apply_patches

    if not patches:
        return ""
    scope = as_scope(scope)
    prefix = scope.prefix.rstrip("/")
    with scratch_tree(repo, scope.commit, prefix) as (workdir, env):
        apply_patches(workdir, [(p, scope.patches[p]) for p in patches])
        src = Path(env["GIT_WORK_TREE"])
        git(src, "add", "--all", "--force", env=env)  # --force: a created file matching .gitignore counts too
        return git(src, "diff", "--cached", "--no-ext-diff", "--no-textconv", "--no-color",
                   *([f"--relative={prefix}"] if prefix else []), scope.commit, "--", env=env)


def promoted_diff(inp: ReportInputs) -> str:
    """The promoted candidate's patches as one diff against the locked commit (:func:`combined_diff`: I/O, a scratch
    export of the repository); ``""`` when nothing was promoted, the candidate has no patches or no scope is
    locked."""
    c, scope = inp.campaign, scope_or_none(inp.campaign)
    cand = (inp.result.promotion or {}).get("candidate")
    if not cand or scope is None:
        return ""
    return combined_diff(Path(c.repo_path), scope, cand["patches"])


def finished_now() -> str:
    """result.json's ``campaign.finished_at``: now, UTC, ISO 8601."""
    return datetime.now(timezone.utc).isoformat()


def _experience(doctor: Any) -> dict[str, Any]:
    """The report's experience block: the doctor's coverage, plus the rules carried from other campaigns' failures
    (``rules``, only when there are some)."""
    out = dict((doctor.experience_coverage if doctor else None) or {})
    rules = carried_rules(doctor.experience) if doctor else []
    if rules:
        out["rules"] = rules
    return out


def build_result(inp: ReportInputs, *, diff: str, finished_at: str) -> dict[str, Any]:
    """result.json (schema ``infrarsi.result/1``): everything REPORT.md and apply need.  Pure: a function of
    ``inp``, the promoted candidate's combined ``diff`` (:func:`promoted_diff`) and ``finished_at``
    (:func:`finished_now`); reads no repository, store or clock and writes nothing."""
    c, contract = inp.campaign, inp.contract
    scope, doctor, res = scope_or_none(c), doctor_or_none(c), inp.result
    ref_full = complete_config(contract, contract.reference_config) or contract.reference_config
    t0 = doctor.t0 if doctor else None
    obs = inp.observations
    trials_json: list[dict[str, Any]] = []
    cum = 0.0
    rejections = {layer: 0 for layer in LAYERS}
    launch = inp.launch
    on_gpu = launch.gpus_per_node > 0  # CPU trials are booked as CPU-hours (one slot), never as GPU-hours
    devices = max(1, launch.nodes * max(1, launch.gpus_per_node))
    cum_all = 0.0
    for t in inp.trials:
        o = obs.get(t.id)
        hours = 0.0
        if t.start_time is not None and t.end_time is not None:
            hours = max(0.0, t.end_time - t.start_time) * devices / 3600.0
        gpu_h = hours if on_gpu else 0.0
        cum += gpu_h
        cum_all += hours
        full = complete_config(contract, contract.reference_config | t.config) or t.config
        step = o.step_time_s if o and t.outcome == "ok" else None
        if t.outcome == "rejected" and o is not None:
            rejections[o.first_failed_layer or "L0"] = rejections.get(o.first_failed_layer or "L0", 0) + 1
        trials_json.append({
            "seq": t.seq, "stage": t.stage, "config": full, "changed": _changed(ref_full, full),
            "changed_passed": _changed_passed(contract, _changed(ref_full, full)),
            "patches": t.patches, "outcome": t.outcome or t.status, "reason": t.reason,
            "step_time_s": step, "speedup": (t0 / step) if (t0 and step) else None,
            "peak_mem_gib": o.peak_mem_gib if o else None, "gpu_hours": gpu_h, "cum_gpu_hours": cum,
            "cpu_hours": 0.0 if on_gpu else hours, "cum_hours": cum_all,
            "first_failed_layer": o.first_failed_layer if o else None, "accepted": bool(o and o.accepted),
            "isolation": ((o.details or {}).get("isolation") or {}).get("mode") if o else None,
        })
    promo = res.promotion or {}
    cand = promo.get("candidate")
    promoted = None
    speedup = float(c.delivered_speedup or 1.0)
    if cand:
        full = complete_config(contract, contract.reference_config | cand["config"]) or cand["config"]
        verdicts = inp.promoted_verdicts
        times = [p["candidate_s"] for p in promo.get("pairs", []) if p.get("candidate_s")
                 and p["group"].startswith(cand["signature"][:16])]
        promoted = {
            "config": full, "changed": _changed(ref_full, full), "patches": cand["patches"],
            "changed_passed": _changed_passed(contract, _changed(ref_full, full)),
            "diff": diff,
            "step_time_s": sorted(times)[len(times) // 2] if times else None, "speedup": speedup,
            "verdicts": [v.__dict__ for v in verdicts],
        }
        if promo.get("speed_reproduces"):
            promoted["verdicts"] = [v for v in promoted["verdicts"] if v["invariant"] != "speed_reproduces"]
            g = promo["speed_reproduces"]
            promoted["verdicts"].append({"invariant": g["name"], "layer": g["layer"], "status": g["status"],
                                         "required": True, "reason": g["reason"]})
    fpt, fpt_source = flops_per_token_of(contract, doctor.header_extra if doctor else {})
    mfu = None
    if fpt and t0 and on_gpu:  # no GPU, no GPU peak: MFU is not computed for CPU trials
        tpu = contract.workload.tokens_per_update
        after_t = promoted["step_time_s"] if promoted and promoted.get("step_time_s") else t0 / speedup
        mfu = {"formula": MFU_FORMULA, "flops_per_token": float(fpt), "flops_per_token_source": fpt_source,
               "tokens_per_update": tpu, "devices": devices,
               "peak_flops": PEAK_FLOPS, "before": tpu / t0 * float(fpt) / (devices * PEAK_FLOPS),
               "after": tpu / after_t * float(fpt) / (devices * PEAK_FLOPS)}
    by_stage = [dict(r) for r in inp.cost_by_stage]
    total = sum(r["gpu_hours"] for r in by_stage)
    failed = sum(r["gpu_hours"] for r in by_stage if r["failure_class"] not in (None, "rejected"))
    rejected_h = sum(r["gpu_hours"] for r in by_stage if r["failure_class"] == "rejected")
    cpu = {k: sum(r.get("cpu_hours", 0.0) for r in by_stage if pred(r["failure_class"])) for k, pred in (
        ("total_cpu_hours", lambda f: True), ("failed_cpu_hours", lambda f: f not in (None, "rejected")),
        ("rejected_cpu_hours", lambda f: f == "rejected"))}
    if inp.search.error is not None:
        memory_table, search = [], {"error": inp.search.error}
    else:
        memory_table, search = list(inp.search.memory_table), dict(inp.search.summary)
    return {
        "schema": "infrarsi.result/1",
        "campaign": {"id": c.id, "name": c.name, "owner": c.owner, "state": c.state,
                     "contract_digest": c.contract_digest, "repo": c.repo_path,
                     "commit": scope.commit if scope else None,
                     "executor": c.executor, "created_at": c.created_at.isoformat(),
                     "device": "gpu" if on_gpu else "cpu", "sbatch": c.sbatch or {},
                     "finished_at": finished_at},
        "delivered_speedup": speedup,
        # which number delivered_speedup is, and the noise bound its margin came from (docs/verifier.md)
        "speedup_statistic": promo.get("statistic"),
        "noise_bound": promo.get("noise"),
        "invariant_count": len(INVARIANTS),
        "reason": promo.get("reason", ""),
        "reference": {"config": ref_full, "step_time_s": t0, "sigma_pair": doctor.sigma_pair if doctor else None,
                      "promotion_margin": doctor.promotion_margin if doctor else None,
                      "big_knob_gate": doctor.big_knob_gate if doctor else None,
                      "phases": dict(doctor.phases) if doctor else {},
                      "peak_mem_gib": doctor.reference_peak_mem_gib if doctor else None,
                      "reference_window_means": list(doctor.reference_window_means) if doctor else []},
        "promoted": promoted,
        "experience": _experience(doctor),
        "mfu": mfu,
        "mfu_omitted": None if on_gpu else "CPU trials: there is no GPU peak to measure MFU against",
        "trials": trials_json,
        "rejections_by_layer": rejections,
        "refused_patches": dict(scope.refused_patches) if scope else {},
        "cost": {"by_stage": by_stage, "total_gpu_hours": total, "failed_gpu_hours": failed,
                 "rejected_gpu_hours": rejected_h, "budget_gpu_hours": c.budget_gpu_hours, **cpu,
                 "unit": "GPU" if on_gpu else "CPU",
                 "share_of_budget": (total + cpu["total_cpu_hours"]) / c.budget_gpu_hours
                 if c.budget_gpu_hours else None,
                 "at_search_stop": res.budget_at_search_stop},
        "concurrency": concurrency([(t.start_time, t.end_time) for t in inp.trials if t.stage == "search"]),
        "proposers": dict(inp.proposers),
        "memory_table": memory_table,
        "search": search,
        "promotion": {k: v for k, v in promo.items() if k != "candidate"},
    }


def pack_yaml(contract: Contract, c: CampaignRecord, result: Mapping[str, Any]) -> str:
    """The promoted launch configuration: knob values, the rendered command and environment, and patch names."""
    from ruamel.yaml import YAML
    import io

    promoted = result.get("promoted")
    config = promoted["config"] if promoted else result["reference"]["config"]
    plan = render_launch(contract, config)
    doc = {
        "campaign": c.id, "name": c.name, "contract_digest": c.contract_digest,
        "delivered_speedup": result["delivered_speedup"],
        "knobs": dict(config), "patches": list(promoted["patches"]) if promoted else [],
        "command": list(plan.argv), "env": dict(plan.env), "config_edits": plan.config_edits,
    }
    buf = io.StringIO()
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.dump(doc, buf)
    return buf.getvalue()


def write_artifacts(inp: ReportInputs, result: Mapping[str, Any]) -> dict[str, Path]:
    """Write result.json, pack.yaml, progress.png and REPORT.md from ``result`` (:func:`build_result` of ``inp``)
    and return their paths.  The experience write-back is the engine's (it writes to the store)."""
    from infrarsi.controller.report.markdown import render_report
    from infrarsi.controller.report.plot import plot_progress

    c = inp.campaign
    out = report_dir(c)
    out.mkdir(parents=True, exist_ok=True)
    result = dict(result)
    _atomic_write(out / "result.json", json.dumps(result, indent=2, default=str).encode())
    _atomic_write(out / "pack.yaml", pack_yaml(inp.contract, c, result).encode())
    plot_progress(result, out / "progress.png")
    _atomic_write(out / "REPORT.md", render_report(result).encode())
    return {"dir": out, "report": out / "REPORT.md", "result": out / "result.json", "pack": out / "pack.yaml",
            "plot": out / "progress.png"}
