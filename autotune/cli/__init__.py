"""The ``autotune`` console script."""

from __future__ import annotations

import sys

import click
import typer

from autotune.cli._app import app
from autotune.errors import AutotuneError

__all__ = ["app", "main"]

# Typer up to 0.2x raises click's exceptions; later releases raise those of a click copy they
# ship (their base is ``typer.TyperException``, and ``typer.Abort``/``typer.Exit`` are theirs).
_ABORTS = (click.exceptions.Abort, typer.Abort)
_EXITS = (click.exceptions.Exit, typer.Exit)
_USAGE_ERRORS = (click.ClickException, getattr(typer, "TyperException", click.ClickException))


def main() -> None:
    """Run the CLI: an autotune error is one line on stderr and exit 1 (traceback: --debug); a
    usage error is click's message and its exit code (2); Ctrl-C exits 130."""
    try:
        # Without standalone mode click returns an exit code instead of raising it.
        code = app(standalone_mode=False)
    except AutotuneError as exc:
        if "--debug" in sys.argv:
            raise
        print(f"autotune: error: {exc}", file=sys.stderr)
        sys.exit(1)
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
