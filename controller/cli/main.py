"""Entry point of the ``infrarsi`` console script.

Verbs are registered by name -> ``module:attribute`` and imported only when
invoked, so ``infrarsi --help`` stays fast and a verb's heavy dependencies
(matplotlib, optuna, torch in examples) load only for that verb.  Every
module named here exposes a :class:`click.Command` or :class:`click.Group`.

Errors: any :class:`infrarsi.controller.errors.InfrarsiError` raised by a verb is
printed as one line ``infrarsi: error: <message>`` and exits with status 2; a usage error is one line
``infrarsi: error: <message> (see '<command> --help')`` (status 2); any other exception is a bug and prints one
line ``infrarsi: internal error: <type>: <message> (rerun with INFRARSI_DEBUG=1 for the traceback)`` (status 3).
Every printed message passes through :func:`infrarsi.controller.redact.redact_text`, so no password reaches the
terminal, not even from an exception raised deep inside a driver.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import click

from infrarsi.controller.errors import InfrarsiError, one_line
from infrarsi.controller.redact import redact_text

#: exit status for an exception that is not an InfrarsiError (a bug)
INTERNAL_ERROR_EXIT = 3

#: verb -> "module:attribute" (the attribute is a click command or group)
COMMANDS: dict[str, str] = {
    "contract": "infrarsi.controller.cli.contract_cmd:contract",
    "db": "infrarsi.controller.cli.db_cmd:db",
    "workload": "infrarsi.controller.cli.workload_cmd:workload",
    "campaign": "infrarsi.controller.cli.campaign_cmd:campaign",
    "finops": "infrarsi.controller.cli.finops_cmd:finops",
    "audit": "infrarsi.controller.cli.audit_cmd:audit",
    "init": "infrarsi.controller.cli.stages_cmd:init_cmd",
    "doctor": "infrarsi.controller.cli.stages_cmd:doctor_cmd",
    "run": "infrarsi.controller.cli.stages_cmd:run_cmd",
    "report": "infrarsi.controller.cli.stages_cmd:report_cmd",
    "apply": "infrarsi.controller.cli.stages_cmd:apply_cmd",
    "submit": "infrarsi.controller.cli.serve_cmd:submit_cmd",
    "queue": "infrarsi.controller.cli.queue_cmd:queue_cmd",
    "serve": "infrarsi.controller.cli.serve_cmd:serve_cmd",
    "exec": "infrarsi.verifier.cli:exec_cmd",
    "verify": "infrarsi.verifier.cli:verify_cmd",
    "bench": "infrarsi.controller.cli.bench_cmd:bench",
    "bank": "infrarsi.controller.cli.bank_cmd:bank",
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(module_name)
        return getattr(module, attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="infrarsi")
def cli() -> None:
    """infrarsi: verified speedups for LLM training jobs on Slurm."""


def _say(prefix: str, message: object) -> None:
    click.echo(f"infrarsi: {prefix}: {one_line(redact_text(str(message)))}", err=True)


def _debug() -> bool:
    return os.environ.get("INFRARSI_DEBUG", "") not in ("", "0")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every failure ends as exactly one stderr line and a non-zero exit (see the module docstring)."""
    try:
        cli.main(args=argv, prog_name="infrarsi", standalone_mode=False)
    except InfrarsiError as exc:
        _say("error", exc)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("infrarsi: aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "infrarsi"
        _say("error", f"{exc.format_message()} (see '{where} --help')")
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _say("error", exc.format_message())
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        # the reader went away (``infrarsi ... | head``): stop quietly, without a second failure at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except Exception as exc:  # the last resort: a bug, but still one line
        if _debug():
            click.echo(redact_text("".join(traceback.format_exception(exc))).rstrip("\n"), err=True)
        message = one_line(redact_text(str(exc)), 300) or "(no message)"
        _say("internal error", f"{type(exc).__name__}: {message} (rerun with INFRARSI_DEBUG=1 for the traceback)")
        sys.exit(INTERNAL_ERROR_EXIT)


if __name__ == "__main__":  # pragma: no cover
    main()
