"""The bounded prompt: :func:`build_prompt` is a pure function of a
:class:`~infrarsi.controller.proposers.base.PromptContext` and a character bound (golden tests in
``tests/proposers/golden/``).

Sections, in order: the request and its rules, the answer format, the task contract, the phase breakdown and
Amdahl ceiling, the trials (full records for the fastest and the most recent ones, one line each for the older
ones), every rejected patch with its verdict and reason (so a model does not repeat a cheat), the verified patches
(``complete`` requests) and the editable files, trimmed around the lines that the phase breakdown says matter.

Budget (of ``max_chars``): the fixed text first; then the contract (at most 1/4), the trial records (1/5), the
rejected patches (1/6) and the verified patches (1/5), each cut with a marker naming what was left out; the editable
files get what remains.  A file that does not fit whole is shown as windows around its highest-scoring lines (a
line scores the share of every phase whose keywords it contains) with ``... lines a-b omitted ...`` markers.  The
result is never longer than ``max_chars``.  Deterministic: dictionaries are read in sorted order, floats printed
with fixed precision.
"""

from __future__ import annotations

import math
from typing import Literal, Mapping

from infrarsi.controller.proposers.base import PromptContext, RejectedPatch, TrialSummary

AnswerForm = Literal["json", "edit"]
#: how many trials get a full record: the fastest N and the most recent N
FULL_RECORDS = 3
#: context lines kept on each side of a line that matters
WINDOW = 6

#: words that mark a source line as belonging to a profiled phase (lower case)
PHASE_KEYWORDS: Mapping[str, tuple[str, ...]] = {
    "forward": ("forward", "attn", "attention", "mlp", "softmax", "matmul", "linear", "embedding", "norm", "gelu",
                "einsum", "@"),
    "backward": ("backward", "loss", "grad", "checkpoint", "autocast", "scaler"),
    "optimizer": ("optim", "adam", "sgd", ".step(", "zero_grad", "clip_grad", "fused", "foreach", "param_groups"),
    "data": ("dataloader", "get_batch", "dataset", "batch", "load", "pin_memory", "non_blocking", ".to(", "memmap",
             "randint"),
    "collectives": ("all_reduce", "allreduce", "distributed", "ddp", "barrier", "broadcast", "dist.", "no_sync",
                    "bucket"),
    "compile": ("compile", "cuda_graph", "graph"),
}
_PHASE_ALIASES = {"fwd": "forward", "bwd": "backward", "optim": "optimizer", "dataloader": "data", "io": "data",
                  "comm": "collectives", "communication": "collectives", "allreduce": "collectives"}

_TASK = {
    "priors": (
        "Estimate how each knob value in the contract below changes the time of one optimizer update relative to "
        "the reference configuration, and how it changes peak memory per GPU. Give one prior per knob value you "
        "can judge (skip the reference values). Be calibrated: mean_log_speedup is ln(reference step time / step "
        "time with this value) and spread its standard deviation; wide spreads are better than confident wrong "
        "numbers. Patches are optional for this request."),
    "patches": (
        "Propose source patches to the editable files that make one optimizer update faster WITHOUT changing what "
        "the job computes: the same tokens per update, data, model, optimizer steps and numerics (loss within the "
        "contract's tolerance). Every trial is verified from a signed receipt: patches that skip micro-steps or "
        "updates, fake or move timing, touch frozen files, change the data or the numerics are rejected (see the "
        "rejected patches below; never repeat one). Aim at the phases that take the most time; the Amdahl ceiling "
        "bounds what is possible. Knob changes are not patches: the search already tries the contract's knobs."),
    "complete": (
        "Each verified patch below passed verification on its own but gains little. Propose patches that combine "
        "them into one change that applies to the unpatched files, or that complete them (the same idea carried "
        "to the remaining code), under the same rules: nothing the job computes may change."),
}

_FORMAT_JSON = (
    "## Answer format\n"
    "Answer with ONE JSON object and nothing else:\n"
    '{"priors": [{"knob": "<knob name>", "value": "<value as written in the contract>", '
    '"mean_log_speedup": <float>, "spread": <float > 0>, "mem_gib": <change of peak GiB per GPU, or null>}],\n'
    ' "patches": [{"diff": "<unified diff (git diff format, paths a/<file> and b/<file> relative to the repo)>", '
    '"rationale": "<one line, at most 200 characters>", "claimed_gain": <expected ln speedup, float>}]}\n'
    "Either list may be empty. A patch may change only the editable files shown below and at most "
    "patches.max_changed_lines lines (added + removed); it must apply cleanly with `git apply`.\n")

_FORMAT_EDIT = (
    "## Answer format\n"
    "Edit the editable files in the current directory in place; that edit is your proposal (a diff is taken "
    "when you exit). Change no other file (an edit to any other file fails the whole proposal), at most "
    "patches.max_changed_lines lines in all. Do not run the training job. Exit 0 when done.\n")


def _f(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}"


def _x(speedup: float | None) -> str:
    """``1.234x``, or ``-`` when unknown."""
    return "-" if speedup is None or not math.isfinite(speedup) else f"{speedup:.3f}x"


def _clip(text: str, limit: int, what: str) -> str:
    """``text`` cut to ``limit`` characters at a line boundary, with a marker naming ``what`` was cut."""
    if len(text) <= limit:
        return text
    marker = f"\n... ({what} cut: {len(text)} characters, {limit} shown)\n"
    keep = max(0, limit - len(marker))
    cut = text.rfind("\n", 0, keep)
    head = text[:cut if cut > keep // 2 else keep]
    return head + marker


def _one_line(text: str | None, limit: int = 200) -> str:
    s = " ".join((text or "").split())
    s = "".join(ch if ch.isprintable() else "?" for ch in s)
    return s if len(s) <= limit else s[:limit - 3] + "..."


def _config(cfg: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={cfg[k]}" for k in sorted(cfg)) or "reference"


def _trial_full(t: TrialSummary) -> str:
    head = (f"### {t.key}: {t.outcome}" + (f" ({t.verdict})" if t.verdict else "")
            + f", speedup {_x(t.speedup)}, step {_f(t.step_time_s, 4)} s"
            + (f", peak {_f(t.peak_mem_gib, 2)} GiB" if t.peak_mem_gib is not None else ""))
    lines = [head, f"config: {_config(t.config)}; patches: {', '.join(t.patches) or 'none'}"]
    if t.reason:
        lines.append(f"reason: {_one_line(t.reason)}")
    return "\n".join(lines) + "\n"


def _trial_line(t: TrialSummary) -> str:
    extra = f" {t.verdict}" if t.verdict else ""
    why = f" - {_one_line(t.reason, 100)}" if t.reason else ""
    patches = f" +{'+'.join(t.patches)}" if t.patches else ""
    return (f"- {t.key}: {t.outcome}{extra}, speedup {_x(t.speedup)}, step {_f(t.step_time_s, 4)} s: "
            f"{_config(t.config)}{patches}{why}\n")


def _trials_section(trials: tuple[TrialSummary, ...], limit: int) -> str:
    if not trials:
        return "## Trials\nNone yet.\n"
    idx = list(range(len(trials)))
    finished = [i for i in idx if trials[i].speedup is not None and trials[i].outcome == "ok"]
    fastest = sorted(finished, key=lambda i: (-(trials[i].speedup or 0.0), i))[:FULL_RECORDS]
    recent = idx[-FULL_RECORDS:]
    full = sorted(set(fastest) | set(recent))
    head = (f"## Trials ({len(trials)}; full records for the {len(fastest)} fastest and the {len(recent)} most "
            f"recent, one line each for the others, oldest first)\n")
    full_text = "".join(_trial_full(trials[i]) for i in full)
    older = [i for i in idx if i not in full]
    lines = [_trial_line(trials[i]) for i in older]
    room = limit - len(head) - len(full_text)
    kept: list[str] = []
    used = 0
    for line in reversed(lines):  # keep the most recent one-liners when they do not all fit
        if used + len(line) > room - 80:
            break
        kept.append(line)
        used += len(line)
    kept.reverse()
    omitted = len(lines) - len(kept)
    body = (f"({omitted} older trials omitted)\n" if omitted else "") + "".join(kept)
    return _clip(head + body + full_text, limit, "trial records")


def _rejected_section(rejected: tuple[RejectedPatch, ...], limit: int) -> str:
    if not rejected:
        return ""
    head = f"## Rejected patches ({len(rejected)}; do not propose these or anything like them)\n"
    lines = [f"- {_one_line(r.name, 80)}: {_one_line(r.verdict, 60)}: {_one_line(r.reason, 200)} "
             f"(diff {r.diff_digest[:12]})\n" for r in rejected]
    kept: list[str] = []
    used = len(head) + 60
    for line in reversed(lines):
        if used + len(line) > limit:
            break
        kept.append(line)
        used += len(line)
    kept.reverse()
    omitted = len(lines) - len(kept)
    return head + (f"({omitted} earlier rejected patches omitted)\n" if omitted else "") + "".join(kept)


def _verified_section(ctx: PromptContext, limit: int) -> str:
    if not ctx.verified_patches:
        return ""
    parts = [f"## Verified patches ({len(ctx.verified_patches)})\n"]
    for v in ctx.verified_patches:
        parts.append(f"### {v.name} (speedup {_x(v.speedup)})\n```diff\n{v.diff.rstrip()}\n```\n")
    return _clip("".join(parts), limit, "verified patches")


def phase_weights(breakdown: Mapping[str, float]) -> dict[str, float]:
    """Phase shares keyed by the canonical phase names of :data:`PHASE_KEYWORDS` (aliases folded, unknown
    phases dropped, negative or non-finite shares ignored)."""
    out: dict[str, float] = {}
    for name in sorted(breakdown):
        share = breakdown[name]
        if not isinstance(share, (int, float)) or not math.isfinite(share) or share <= 0:
            continue
        key = _PHASE_ALIASES.get(name.lower(), name.lower())
        if key in PHASE_KEYWORDS:
            out[key] = out.get(key, 0.0) + float(share)
    return out


def line_scores(text: str, weights: Mapping[str, float]) -> list[float]:
    """Per line of ``text``: the summed share of every phase with a keyword in the line, plus 0.01 for
    ``def``/``class`` lines (they show the structure)."""
    scores: list[float] = []
    for line in text.split("\n"):
        low = line.lower()
        s = sum(w for phase, w in weights.items() if any(k in low for k in PHASE_KEYWORDS[phase]))
        if low.lstrip().startswith(("def ", "class ")):
            s += 0.01
        scores.append(s)
    return scores


def _render_windows(lines: list[str], keep: set[int]) -> str:
    out: list[str] = []
    i, n = 0, len(lines)
    while i < n:
        if i in keep:
            out.append(lines[i] + "\n")
            i += 1
            continue
        j = i
        while j < n and j not in keep:
            j += 1
        out.append(f"... line {j} omitted ...\n" if j == i + 1 else f"... lines {i + 1}-{j} omitted ...\n")
        i = j
    return "".join(out)


def trim_file(text: str, weights: Mapping[str, float], limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters; otherwise windows of :data:`WINDOW` lines around its
    highest-scoring lines (ties: earlier lines first), added while they fit, with omission markers."""
    if len(text) <= limit:
        return text
    lines = text.split("\n")
    scores = line_scores(text, weights)
    order = sorted(range(len(lines)), key=lambda i: (-scores[i], i))
    keep: set[int] = set()
    for i in order:
        if scores[i] <= 0 and keep:
            break
        cand = keep | set(range(max(0, i - WINDOW), min(len(lines), i + WINDOW + 1)))
        if len(_render_windows(lines, cand)) > limit:
            # try the line alone before giving up on it
            cand = keep | {i}
            if len(_render_windows(lines, cand)) > limit:
                continue
        keep = cand
    rendered = _render_windows(lines, keep) if keep else ""
    return rendered if len(rendered) <= limit else _clip(rendered, limit, "file")


def _files_section(ctx: PromptContext, limit: int) -> str:
    paths = sorted(ctx.editable_files)
    if not paths:
        return "## Editable files\nNone.\n"
    weights = phase_weights(ctx.phase_breakdown)
    head = f"## Editable files ({len(paths)})\n"
    wrappers = {p: f"### {p}\n```\n" for p in paths}
    tail = "```\n"
    room = limit - len(head) - sum(len(w) + len(tail) for w in wrappers.values())
    if room <= 0:
        return _clip(head + "".join(f"- {p}\n" for p in paths), limit, "file list")
    texts = {p: ctx.editable_files[p] if ctx.editable_files[p].endswith("\n") or not ctx.editable_files[p]
             else ctx.editable_files[p] + "\n" for p in paths}
    total = sum(len(t) for t in texts.values())
    budgets: dict[str, int] = {}
    if total <= room:
        budgets = {p: len(texts[p]) for p in paths}
    else:
        # share the room by each file's weight of scored lines (at least its fair share of a tenth of the room)
        mass = {p: sum(line_scores(texts[p], weights)) + 0.1 for p in paths}
        msum = sum(mass.values())
        floor = room // (10 * len(paths))
        spare = room - floor * len(paths)
        budgets = {p: floor + int(spare * mass[p] / msum) for p in paths}
        # give what small files do not need to the others, in path order
        left = 0
        for p in paths:
            if len(texts[p]) < budgets[p]:
                left += budgets[p] - len(texts[p])
                budgets[p] = len(texts[p])
        for p in paths:
            if left <= 0:
                break
            need = len(texts[p]) - budgets[p]
            if need > 0:
                extra = min(need, left)
                budgets[p] += extra
                left -= extra
    body = "".join(wrappers[p] + trim_file(texts[p], weights, budgets[p]) + tail for p in paths)
    return _clip(head + body, limit, "editable files")


def _phase_section(ctx: PromptContext) -> str:
    lines = ["## Where the time goes (phase breakdown of one update)\n"]
    items = sorted(ctx.phase_breakdown.items(), key=lambda kv: (-kv[1], kv[0]))
    if items:
        lines.append(", ".join(f"{k} {100 * v:.1f}%" for k, v in items) + "\n")
    else:
        lines.append("not measured\n")
    if ctx.amdahl_ceiling is not None:
        lines.append(f"Amdahl ceiling for what patches can reach: {_f(ctx.amdahl_ceiling, 2)}x\n")
    return "".join(lines)


def build_prompt(ctx: PromptContext, max_chars: int, *, answer: AnswerForm = "json") -> str:
    """The prompt for ``ctx``, never longer than ``max_chars`` characters (see the module docstring).

    ``answer``: ``json`` (language models answer with a JSON proposal) or ``edit`` (agents edit the files).
    """
    max_chars = max(0, int(max_chars))
    task = _TASK.get(ctx.kind, _TASK["patches"])
    fixed = (f"# infrarsi proposal request: {ctx.kind}\n\n"
             f"You help make an LLM training job faster without changing what it computes.\n{task}\n\n"
             + (_FORMAT_EDIT if answer == "edit" else _FORMAT_JSON) + "\n")
    contract = _clip(f"## Task contract (infrarsi.yaml)\n```yaml\n{ctx.contract_yaml.rstrip()}\n```\n",
                     max_chars // 4, "contract")
    phases = _phase_section(ctx)
    trials = _trials_section(ctx.trials, max_chars // 5)
    rejected = _rejected_section(ctx.rejected_patches, max_chars // 6)
    verified = _verified_section(ctx, max_chars // 5)
    closing = "\nAnswer now" + (" with the JSON object only.\n" if answer == "json" else " by editing the files.\n")
    parts = [fixed, contract, "\n", phases, "\n", trials, "\n"]
    if rejected:
        parts += [rejected, "\n"]
    if verified:
        parts += [verified, "\n"]
    used = sum(len(p) for p in parts) + len(closing)
    files = _files_section(ctx, max_chars - used) if max_chars - used > 200 else ""
    text = "".join(parts) + files + closing
    if len(text) > max_chars:
        text = _clip(text, max_chars, "prompt")
        text = text[:max_chars]
    return text
