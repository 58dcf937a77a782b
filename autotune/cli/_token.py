"""``autotune token new``: a fresh API token for the server's tokens file, a thin face over
:func:`autotune.service.new_token`."""

from __future__ import annotations

from typing import Annotated

import typer

from autotune.service import ROLES, Role, check_token_name, new_token, token_line

token_app = typer.Typer(
    help="API tokens for `autotune serve` (AUTOTUNE_API_TOKENS_FILE).", no_args_is_help=True
)


def _role(value: str) -> str:
    if value not in ROLES:
        raise typer.BadParameter(f"{value!r} is not a role; use one of {', '.join(ROLES)}")
    return value


@token_app.command("new")
def new(
    name: Annotated[str, typer.Argument(help="Who holds the token; jobs record it as submitter.")],
    role: Annotated[
        str,
        typer.Option(
            callback=_role,
            help="read (list and read jobs), submit (also submit and cancel its own jobs) or "
            "admin (everything).",
        ),
    ] = "submit",
) -> None:
    """Print a fresh token once, and the line to add to the server's tokens file.

    The file stores only the token's hash: keep the token itself where its holder reads it,
    since it cannot be shown again.
    """
    check_token_name(name)
    chosen: Role = next(known for known in ROLES if known == role)
    token = new_token()
    typer.echo(f"token for {name} (shown once; give it to them): {token}", err=True)
    typer.echo(token)
    typer.echo("add this line to the file AUTOTUNE_API_TOKENS_FILE names:", err=True)
    typer.echo(token_line(name, chosen, token))


def register(app: typer.Typer) -> None:
    app.add_typer(token_app, name="token")
