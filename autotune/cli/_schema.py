"""``autotune schema``: the recommendation document's JSON Schema, for validators and code
generators."""

from __future__ import annotations

import json

import typer


def schema() -> None:
    """Print the JSON Schema of the recommendation that autotune run --out writes."""
    from autotune.recommend import recommendation_json_schema

    typer.echo(json.dumps(recommendation_json_schema(), indent=2))


def register(app: typer.Typer) -> None:
    app.command()(schema)
