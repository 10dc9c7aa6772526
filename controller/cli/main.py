"""Entry point of the ``infrarsi`` console script.

Verbs are registered by name -> ``module:attribute`` and imported only when
invoked, so ``infrarsi --help`` stays fast and a verb's heavy dependencies
(matplotlib, optuna, torch in examples) load only for that verb.  Every
module named here exposes a :class:`click.Command` or :class:`click.Group`.

Errors: any :class:`infrarsi.controller.errors.InfrarsiError` raised by a verb is
printed as one line ``infrarsi: error: <message>`` and exits with status 2.
"""

from __future__ import annotations

import importlib
import sys

import click

from infrarsi.controller.errors import InfrarsiError

#: verb -> "module:attribute" (the attribute is a click command or group)
COMMANDS: dict[str, str] = {
    "contract": "infrarsi.controller.cli.contract_cmd:contract",
    "db": "infrarsi.controller.cli.db_cmd:db",
    "workload": "infrarsi.controller.cli.workload_cmd:workload",
    "campaign": "infrarsi.controller.cli.campaign_cmd:campaign",
    "finops": "infrarsi.controller.cli.finops_cmd:finops",
    "init": "infrarsi.controller.cli.stages_cmd:init_cmd",
    "doctor": "infrarsi.controller.cli.stages_cmd:doctor_cmd",
    "run": "infrarsi.controller.cli.stages_cmd:run_cmd",
    "report": "infrarsi.controller.cli.stages_cmd:report_cmd",
    "apply": "infrarsi.controller.cli.stages_cmd:apply_cmd",
    "submit": "infrarsi.controller.cli.serve_cmd:submit_cmd",
    "serve": "infrarsi.controller.cli.serve_cmd:serve_cmd",
    "exec": "infrarsi.verifier.cli:exec_cmd",
    "verify": "infrarsi.verifier.cli:verify_cmd",
    "bench": "infrarsi.controller.cli.bench_cmd:bench",
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


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; turn :class:`InfrarsiError` into a one-line message and exit 2."""
    try:
        cli.main(args=argv, prog_name="infrarsi", standalone_mode=False)
    except InfrarsiError as exc:
        click.echo(f"infrarsi: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("infrarsi: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
