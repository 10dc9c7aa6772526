"""Click commands ``infrarsi exec`` and ``infrarsi verify`` (registered lazily by controller/cli/main.py).

``infrarsi exec [options] -- CMD ...``: the exec wrapper (see :mod:`infrarsi.verifier.exec`).

``infrarsi verify RECEIPT --reference REF [...] --key-file K --trial-id ID [spec] [--executor-window S:E]``:
judge one receipt against the 17 invariants and print the verdict table (exit 0 accepted, 1 rejected).
``infrarsi verify --rejudge CAMPAIGN``: re-judge every stored receipt of a campaign (with the executor's
stored start/end times, so ``executor_clock`` is re-checked) and print counts by first failed layer and by
invariant.
``infrarsi verify matrix [--jobs N] [--no-adversarial | --adversarial-only] [--executor local|slurm] [--json]``:
run the receipt matrix and the adversarial section (``infrarsi.controller.adversarial``, reached lazily).

User errors print ``infrarsi: error: <one line>`` and exit 2 (this package does not
import ``controller``, so it raises its own :class:`VerifyUsageError`).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from infrarsi.verifier import signing
from infrarsi.verifier.spec import JudgeSpec, SpecError, Verdict


class VerifyUsageError(click.ClickException):
    """A bad argument or file: printed as ``infrarsi: error: ...``, exit status 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:  # noqa: D102 - click API
        click.echo(f"infrarsi: error: {self.message}", err=True)


# ------------------------------------------------------------------ exec -----
@click.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--trial-id", default="", help="Trial id bound into the signed receipt (replay detection).")
@click.option("--out", "out_dir", default=".", type=click.Path(file_okay=False), help="Directory for receipt.json and job.log.")
@click.option("--key-file", help="Hex signing key; deleted before the job starts.")
@click.option("--timeout", "timeout_s", type=float, help="Kill the job's process group after this many seconds.")
@click.option("--frozen-manifest", help="JSON {relpath: sha256} hashed before and after the run.")
@click.option("--memory-cap-gib", type=float, help="Recorded in the receipt.")
@click.option("--cwd", help="Working directory of the job (default: the current one).")
@click.option("--quiet", is_flag=True, help="Do not echo the job's output (job.log still gets it).")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED, required=True)
def exec_cmd(trial_id: str, out_dir: str, key_file: str | None, timeout_s: float | None, frozen_manifest: str | None,
             memory_cap_gib: float | None, cwd: str | None, quiet: bool, cmd: tuple[str, ...]) -> None:
    """Run CMD with a receipt pipe and write a signed receipt; exit with CMD's status."""
    from infrarsi.verifier.exec import ExecOptions, WrapperError, run_wrapped

    argv = list(cmd[1:] if cmd[:1] == ("--",) else cmd)
    opts = ExecOptions(argv=argv, out_dir=Path(out_dir), trial_id=trial_id, key_file=key_file, timeout_s=timeout_s,
                       frozen_manifest=frozen_manifest, memory_cap_gib=memory_cap_gib, cwd=cwd, echo=not quiet)
    try:
        status = run_wrapped(opts)
    except WrapperError as exc:
        raise VerifyUsageError(str(exc)) from None
    sys.exit(status)


# ---------------------------------------------------------------- verify -----
def format_verdict(verdict: Verdict) -> str:
    """Aligned verdict table (layer, invariant, status, required, reason) and a summary line."""
    rows = [("layer", "invariant", "status", "req", "reason")]
    for it in verdict.items:
        rows.append((it.layer, it.name, it.status, "yes" if it.required else "no", it.reason))
    width = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join([c.ljust(width[i]) for i, c in enumerate(r[:4])] + [r[4]]) for r in rows]
    lines.append(verdict.summary())
    return "\n".join(lines)


def _parse_window(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        a, b = text.split(":")
        return int(a), int(b)
    except ValueError:
        raise VerifyUsageError(f"--window {text!r}: expected START:END (1-based, inclusive)") from None


def _parse_executor_window(text: str | None) -> tuple[float, float] | None:
    """``START:END`` unix seconds as the executor saw the trial run (``--executor-window``)."""
    if text is None:
        return None
    try:
        a, b = (float(x) for x in text.split(":"))
    except ValueError:
        raise VerifyUsageError(f"--executor-window {text!r}: expected START:END in unix seconds") from None
    if not b >= a:
        raise VerifyUsageError(f"--executor-window {text!r}: END must not be before START")
    return a, b


def spec_from_contract(path: str) -> dict[str, Any]:
    """Judge-spec fields from an ``infrarsi.yaml`` contract (read as plain YAML; frozen files hashed next to it)."""
    import hashlib

    from ruamel.yaml import YAML, YAMLError

    p = Path(path)
    try:
        doc = YAML(typ="safe").load(p.read_text())
    except (OSError, YAMLError) as exc:
        raise VerifyUsageError(f"--contract {path}: cannot read ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict):
        raise VerifyUsageError(f"--contract {path}: not a mapping")
    wl, trial = doc.get("workload") or {}, doc.get("trial") or {}
    updates = int(trial.get("updates", 30))
    d: dict[str, Any] = {"updates": updates, "window": list(trial.get("window", (11, 30)))}
    if "tokens_per_update" in wl:
        d["tokens_per_update"] = int(wl["tokens_per_update"])
    if "seq_len" in wl:
        d["seq_len"] = int(wl["seq_len"])
    d["static_invariants"] = sorted((wl.get("static") or {}).keys())
    if "loss_tolerance" in doc:
        d["tau"] = float(doc["loss_tolerance"])
    if "memory_cap_gib" in doc:
        d["memory_cap_gib"] = float(doc["memory_cap_gib"])
    d["precision_menu"] = list(doc.get("precision_menu") or ["fp32"])
    repo = (p.parent / str(doc.get("repo", "."))).resolve()
    manifest = {}
    for rel in doc.get("frozen_files") or []:
        try:
            manifest[str(rel)] = hashlib.sha256((repo / str(rel)).read_bytes()).hexdigest()
        except OSError:
            raise VerifyUsageError(f"--contract {path}: frozen file {rel} not found under {repo}") from None
    d["frozen_manifest"] = manifest
    return d


def _read_master_key(key_file: str | None) -> bytes:
    if key_file is None:
        raise VerifyUsageError("--key-file: the master signing key is required to check signatures")
    try:
        return signing.read_key_file(key_file)
    except (OSError, ValueError) as exc:
        raise VerifyUsageError(f"--key-file {key_file}: {exc}") from None


def _read_receipt_file(path: str) -> tuple[bytes | None, int]:
    """(bytes or None when over the cap, size): never reads more than the receipt cap + 1 bytes."""
    from infrarsi.verifier.receipt import ReceiptError, read_capped

    try:
        return read_capped(path)
    except ReceiptError as exc:
        raise VerifyUsageError(str(exc)) from None


class _VerifyGroup(click.Group):
    """``verify`` routes ``verify RECEIPT ...`` to its hidden ``receipt`` command; ``matrix`` is a sub-command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = next((a for a in args if not a.startswith("-")), None)
        if args and "--rejudge" not in args and not set(args) & {"-h", "--help"} and first not in self.commands:
            args = ["receipt", *args]
        return super().parse_args(ctx, args)


@click.group("verify", cls=_VerifyGroup, invoke_without_command=True)
@click.option("--rejudge", "campaign", type=int, help="Re-judge every stored receipt of campaign CAMPAIGN (id).")
@click.option("--key-file", "rejudge_key", help="Master key for --rejudge (default: the controller's).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output for --rejudge.")
@click.pass_context
def verify_cmd(ctx: click.Context, campaign: int | None, rejudge_key: str | None, as_json: bool) -> None:
    """Judge receipts: verify RECEIPT --reference REF ..., verify --rejudge CAMPAIGN, verify matrix."""
    if ctx.invoked_subcommand is not None:
        return
    if campaign is None:
        click.echo(ctx.get_help())
        return
    from infrarsi.verifier.judge import rejudge

    try:
        store_mod = importlib.import_module("infrarsi.controller.cli.verify_cmd")
    except ImportError as exc:
        raise VerifyUsageError(f"--rejudge needs the controller package ({exc})") from None
    entries, master = store_mod.stored_entries(campaign, rejudge_key)
    counts = rejudge(entries, master)
    if as_json:
        click.echo(json.dumps(counts.to_json(), indent=1))
    else:
        click.echo(counts.table())
        for line in counts.errors:
            click.echo(f"skipped: {line}", err=True)


@verify_cmd.command("receipt", hidden=True)
@click.argument("receipt_path", type=click.Path(dir_okay=False))
@click.option("--reference", "references", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="A reference receipt (repeat the option for several repeats).")
@click.option("--key-file", help="The controller's master key (hex).")
@click.option("--trial-id", required=True, help="The trial the receipt must belong to (replay check).")
@click.option("--contract", type=click.Path(dir_okay=False), help="infrarsi.yaml to take the judge spec from.")
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False), help="A JudgeSpec JSON file.")
@click.option("--updates", type=int)
@click.option("--window", help="START:END, 1-based inclusive.")
@click.option("--tau", type=float)
@click.option("--tokens-per-update", type=int)
@click.option("--seq-len", type=int)
@click.option("--memory-cap-gib", type=float)
@click.option("--precision-menu", help="Comma-separated, e.g. fp32,bf16.")
@click.option("--equivalent-data-order", is_flag=True, default=None)
@click.option("--executor-window", help="START:END unix seconds the executor saw the trial run (executor_clock).")
@click.option("--json", "as_json", is_flag=True)
def verify_receipt(receipt_path: str, references: tuple[str, ...], key_file: str | None, trial_id: str,
                   contract: str | None, spec_file: str | None, updates: int | None, window: str | None,
                   tau: float | None, tokens_per_update: int | None, seq_len: int | None,
                   memory_cap_gib: float | None, precision_menu: str | None, equivalent_data_order: bool | None,
                   executor_window: str | None, as_json: bool) -> None:
    """Judge RECEIPT against the reference receipts; exit 0 when accepted, 1 when rejected."""
    from infrarsi.verifier.judge import judge_raw
    from infrarsi.verifier.receipt import MAX_RECEIPT_BYTES, ReceiptError, oversized_marker, oversized_message

    master = _read_master_key(key_file)
    exec_window = _parse_executor_window(executor_window)
    d: dict[str, Any] = {}
    if contract:
        d.update(spec_from_contract(contract))
    if spec_file:
        try:
            d.update(json.loads(Path(spec_file).read_text()))
        except (OSError, ValueError) as exc:
            raise VerifyUsageError(f"--spec {spec_file}: {exc}") from None
    flags = {"updates": updates, "window": _parse_window(window), "tau": tau, "tokens_per_update": tokens_per_update,
             "seq_len": seq_len, "memory_cap_gib": memory_cap_gib, "equivalent_data_order": equivalent_data_order,
             "precision_menu": precision_menu.split(",") if precision_menu else None}
    d.update({k: v for k, v in flags.items() if v is not None})
    if "updates" not in d:
        raise VerifyUsageError("--updates: the number of updates per trial is required (or --contract/--spec)")
    d.setdefault("window", [1, d["updates"]])
    try:
        spec = JudgeSpec.from_dict(d)
    except SpecError as exc:
        raise VerifyUsageError(str(exc)) from None
    raws: list[bytes] = []
    for i, path in enumerate((receipt_path, *references)):
        got, size = _read_receipt_file(path)
        if got is None and i > 0:
            raise VerifyUsageError(f"reference receipt {path}: {oversized_message(size, MAX_RECEIPT_BYTES)}")
        raws.append(got if got is not None else oversized_marker(size, MAX_RECEIPT_BYTES))
    raw, ref_raws = raws[0], raws[1:]
    try:
        verdict = judge_raw(raw, ref_raws, spec, master, trial_id, executor_window=exec_window)
    except ReceiptError as exc:
        raise VerifyUsageError(f"reference receipt: {exc}") from None
    click.echo(json.dumps(verdict.to_json(), indent=1) if as_json else format_verdict(verdict))
    sys.exit(0 if verdict.accepted else 1)


@verify_cmd.command("matrix")
@click.option("--jobs", type=int, default=2, show_default=True, help="Receipt-matrix cases run in parallel.")
@click.option("--only", multiple=True, help="Run only this case (repeatable; receipt or adversarial case names).")
@click.option("--keep", type=click.Path(file_okay=False), help="Keep the case directories here.")
@click.option("--adversarial/--no-adversarial", default=True, show_default=True,
              help="Also run the adversarial section (real attacks through the controller's trial path).")
@click.option("--adversarial-only", is_flag=True, help="Run only the adversarial section.")
@click.option("--executor", type=click.Choice(["local", "slurm"]), default="local", show_default=True,
              help="Executor for the adversarial trials.")
@click.option("--json", "as_json", is_flag=True)
def matrix_cmd(jobs: int, only: tuple[str, ...], keep: str | None, adversarial: bool, adversarial_only: bool,
               executor: str, as_json: bool) -> None:
    """Run real tiny CPU training jobs, one per perturbation, and check every verdict; then the adversarial
    section (unless --no-adversarial); prints ``agreement: N/M`` per section and overall; exit 1 unless all agree."""
    from infrarsi.verifier.matrix.cases import CASES
    from infrarsi.verifier.matrix.runner import format_matrix, run_matrix

    adv_mod = None
    if adversarial or adversarial_only:
        try:  # verifier/ never imports controller/ at module level
            adv_mod = importlib.import_module("infrarsi.controller.adversarial.runner")
            adv_names = set(importlib.import_module("infrarsi.controller.adversarial.cases").CASE_NAMES)
        except ImportError as exc:
            raise VerifyUsageError(f"--adversarial needs the controller package ({exc})") from None
    else:
        adv_names = set()
    receipt_names = {c.name for c in CASES}
    unknown = [n for n in only if n not in receipt_names | adv_names]
    if unknown:
        raise VerifyUsageError(f"--only: unknown matrix case {unknown[0]!r}")
    only_receipt = [n for n in only if n in receipt_names]
    only_adv = [n for n in only if n in adv_names]
    run_receipt = not adversarial_only and (not only or bool(only_receipt))
    run_adv = adv_mod is not None and (not only or bool(only_adv))
    total = [0, 0]
    doc: dict[str, Any] = {}
    out: list[str] = []
    if run_receipt:
        results = run_matrix(jobs=jobs, only=only_receipt or None, keep=Path(keep) if keep else None)
        n = sum(r.agree for r in results)
        total = [total[0] + n, total[1] + len(results)]
        doc.update({"cases": [r.to_json() for r in results], "agreement": [n, len(results)]})
        out += ["== receipt matrix ==", format_matrix(results)]
    if run_adv:
        assert adv_mod is not None
        adv = adv_mod.run_adversarial(only=only_adv or None, executor=executor,
                                      keep=Path(keep) if keep else None)
        counted = [r for r in adv if not r.skipped]
        n = sum(r.agree for r in counted)
        total = [total[0] + n, total[1] + len(counted)]
        doc["adversarial"] = {"cases": [r.to_json() for r in adv], "agreement": [n, len(counted)]}
        out += ["== adversarial ==", adv_mod.format_adversarial(adv)]
    doc["overall"] = total
    if as_json:
        click.echo(json.dumps(doc, indent=1))
    else:
        click.echo("\n".join(out + ["== overall ==", f"agreement: {total[0]}/{total[1]}"]))
    sys.exit(0 if total[0] == total[1] else 1)
