"""The ``autotune`` console script."""

from __future__ import annotations

import sys

import click
import typer

from autotune.cli._app import app
from autotune.errors import AutotuneError, ConfigError, NoFeasibleConfigError, WorkloadError

__all__ = ["EXIT_CODES", "app", "exit_code_of", "main"]

#: The exit codes a script can rely on; README's CLI reference lists them.
EXIT_CODES = {
    0: "a recommendation was written",
    1: "an internal failure (the database, the service, a bug)",
    2: "invalid input: the command line, the workload or a knob",
    3: "no configuration fits: every measured one failed or broke the memory budget",
    130: "interrupted (Ctrl-C or SIGTERM); the measured trials are kept",
}

# Typer up to 0.2x raises click's exceptions; later releases raise those of a click copy they
# ship (their base is ``typer.TyperException``, and ``typer.Abort``/``typer.Exit`` are theirs).
_ABORTS = (click.exceptions.Abort, typer.Abort)
_EXITS = (click.exceptions.Exit, typer.Exit)
_USAGE_ERRORS = (click.ClickException, getattr(typer, "TyperException", click.ClickException))


def exit_code_of(error: AutotuneError) -> int:
    """The exit code of an error autotune raised on purpose (see :data:`EXIT_CODES`)."""
    if isinstance(error, ConfigError | WorkloadError):
        return 2
    if isinstance(error, NoFeasibleConfigError):
        return 3
    return 1


def main() -> None:
    """Run the CLI: an autotune error is one line on stderr and the exit code of its kind
    (traceback: --debug); a usage error is click's message and its exit code (2); Ctrl-C exits
    130."""
    try:
        # Without standalone mode click returns an exit code instead of raising it.
        code = app(standalone_mode=False)
    except AutotuneError as exc:
        if "--debug" in sys.argv:
            raise
        print(f"autotune: error: {exc}", file=sys.stderr)
        sys.exit(exit_code_of(exc))
    except _ABORTS:
        sys.exit(130)
    except _EXITS as exc:
        sys.exit(exc.exit_code)
    except _USAGE_ERRORS as exc:
        show = getattr(exc, "show", None)
        if show is None:
            print(f"autotune: error: {exc}", file=sys.stderr)
        else:
            show()
        sys.exit(getattr(exc, "exit_code", 2))
    if isinstance(code, int) and code:
        sys.exit(code)
