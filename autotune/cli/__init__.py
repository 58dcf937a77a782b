"""The ``autotune`` console script."""

from __future__ import annotations

import sys

import click

from autotune.cli._app import app
from autotune.errors import AutotuneError

__all__ = ["app", "main"]


def main() -> None:
    """Run the CLI: an autotune error is one line on stderr and exit 1 (traceback: --debug)."""
    try:
        # Without standalone mode click returns an exit code instead of raising it.
        code = app(standalone_mode=False)
    except AutotuneError as exc:
        if "--debug" in sys.argv:
            raise
        print(f"autotune: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    if isinstance(code, int) and code:
        sys.exit(code)
