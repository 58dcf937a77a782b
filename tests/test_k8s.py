"""docker/k8s/ and docker/slurm/: the manifests are valid Kubernetes objects, and what they run
is real: every ``autotune`` command line parses against the CLI, every probe names a path the
API serves, every ``AUTOTUNE_*`` variable is one autotune reads.

No cluster and no Slurm run here: these are the checks that can run without one
(docs/ops/kubernetes.md says so).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer
import typer.main
import yaml
from autotune_api.main import create_app
from autotune_api.routes import ops
from autotune_api.settings import Settings
from conftest_service import AUTOTUNE

from autotune.cli import app

DOCKER = Path(__file__).parent.parent / "docker"
K8S = DOCKER / "k8s"
SBATCH = DOCKER / "slurm" / "autotune-workers.sbatch"
#: The oldest Kubernetes release the manifests are written for, and the newest bundled schema.
KUBERNETES_VERSIONS = ("1.30", kubernetes_validate.latest_version())
CLI = typer.main.get_command(app)


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def all_objects() -> list[dict[str, Any]]:
    return [d for path in manifest_files() for d in documents(path)]


def objects(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in all_objects() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def autotune_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every container that runs an autotune image, with the name of its object."""
    for obj in all_objects():
        if "template" not in obj.get("spec", {}):
            continue
        for container in pod_spec(obj)["containers"]:
            if container["image"].startswith("autotune:"):
                yield obj["metadata"]["name"], container


#: What the CLI raises for a bad option or value (Typer's own click copy since 0.3x).
USAGE_ERROR = getattr(typer, "TyperException", Exception)


def parse_command_line(args: list[str]) -> Any:
    """``autotune ARGS`` as the CLI parses it (its context): a bad option, value or subcommand
    raises."""
    command: Any = CLI
    rest = list(args)
    while hasattr(command, "commands"):  # a group (Typer's click copy has no Group base)
        assert rest, f"{args} names no subcommand"
        name, *rest = rest
        found = command.get_command(typer.Context(command), name)
        assert found is not None, f"`autotune {' '.join(args)}`: there is no subcommand {name!r}"
        command = found
    return command.make_context(" ".join(args), rest)


def options_of(args: list[str]) -> tuple[list[str], list[str]]:
    """The subcommand words before the first option, and the options named after them."""
    words = list(args)
    subcommand = []
    while words and not words[0].startswith("-"):
        subcommand.append(words.pop(0))
    return subcommand, [w.split("=", 1)[0] for w in words if w.startswith("--")]


def known_environment() -> set[str]:
    """The ``AUTOTUNE_*`` variables autotune reads: the service's settings and the CLI's."""
    names = {f"AUTOTUNE_{field.upper()}" for field in Settings.model_fields}

    def walk(command: Any) -> Iterator[str]:
        for param in command.params:
            envvars = param.envvar if isinstance(param.envvar, list | tuple) else [param.envvar]
            yield from (e for e in envvars if e)
        if hasattr(command, "commands"):
            for sub in command.commands.values():
                yield from walk(sub)

    return names | set(walk(CLI))


# -- the manifests are Kubernetes objects ----------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_every_manifest_is_a_valid_kubernetes_object(path: Path, version: str) -> None:
    docs = documents(path)
    assert docs, f"{path} holds no object"
    for document in docs:
        # Strict: a misspelt or misplaced field is an error, not ignored as kubectl would.
        kubernetes_validate.validate(document, version, strict=True)


def test_the_validator_refuses_a_misplaced_field() -> None:
    # The check above can fail: a probe put on the pod instead of its container.
    deployment = objects("Deployment", "autotune-api")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["livenessProbe"] = {"httpGet": {"path": "/healthz"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.parametrize("folder", [K8S, K8S / "postgres"], ids=["k8s", "postgres"])
def test_each_kustomization_lists_exactly_its_folders_manifests(folder: Path) -> None:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    here = sorted(p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == here


# -- what the objects hold -------------------------------------------------------------------


def test_the_api_is_a_deployment_behind_a_service_with_liveness_and_readiness() -> None:
    api = pod_spec(objects("Deployment", "autotune-api"))["containers"][0]
    service = objects("Service", "autotune-api")
    labels = objects("Deployment", "autotune-api")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    # The probes: liveness on the event loop alone, readiness on the database.
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    served = set(create_app(Settings(db="sqlite://")).openapi()["paths"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert api[probe]["httpGet"]["path"] in served and api[probe]["httpGet"]["path"] in (
            ops.PROBES
        )
        # The probe's port is the one `serve --port` listens on, and the Service's target.
        port_name = api[probe]["httpGet"]["port"]
        (port,) = [p["containerPort"] for p in api["ports"] if p["name"] == port_name]
        assert parse_command_line(api["args"]).params["port"] == port
    assert service["spec"]["ports"][0]["targetPort"] in {"http", port}
    serve = parse_command_line(api["args"]).params
    assert serve["worker"] is False and serve["host"] == "0.0.0.0"


def test_the_workers_are_a_deployment_of_one_gpu_each() -> None:
    workers = pod_spec(objects("Deployment", "autotune-worker"))
    (worker,) = workers["containers"]
    assert worker["image"] == "autotune:cuda"
    resources = worker["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert parse_command_line(worker["args"]).params["devices"] == 1
    # Guaranteed QoS with whole CPUs, so the static CPU manager gives the pod its own cores.
    assert resources["requests"] == resources["limits"]
    assert str(resources["limits"]["cpu"]).isdigit()
    assert parse_command_line(worker["args"]).params["device"] == "cuda:0"
    mounts = {m["mountPath"] for m in worker["volumeMounts"]}
    assert "/dev/shm" in mounts  # the DataLoader's shared memory
    # Time for SIGTERM to stop the trial and requeue its job.
    assert workers["terminationGracePeriodSeconds"] >= 60


def test_a_worker_for_jobs_of_several_ranks_owns_as_many_gpus_as_it_claims() -> None:
    (worker,) = pod_spec(objects("Deployment", "autotune-worker-2gpu"))["containers"]
    gpus = worker["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus == 2 and parse_command_line(worker["args"]).params["devices"] == gpus
    assert worker["resources"]["requests"] == worker["resources"]["limits"]


def test_the_migration_is_a_job_running_db_upgrade() -> None:
    job = objects("Job", "autotune-migrate")
    (container,) = pod_spec(job)["containers"]
    assert container["args"] == ["db", "upgrade"]
    assert pod_spec(job)["restartPolicy"] == "Never"


def test_the_database_url_and_token_come_from_a_secret() -> None:
    for name, container in autotune_containers():
        env = {e["name"]: e for e in container.get("env", [])}
        assert "secretKeyRef" in env["AUTOTUNE_DB"]["valueFrom"], name
        assert "value" not in env["AUTOTUNE_DB"], name
        if "AUTOTUNE_API_TOKEN" in env:
            assert "secretKeyRef" in env["AUTOTUNE_API_TOKEN"]["valueFrom"], name
    api_env = {
        e["name"] for e in pod_spec(objects("Deployment", "autotune-api"))["containers"][0]["env"]
    }
    assert "AUTOTUNE_API_TOKEN" in api_env  # it listens beyond the loopback


def test_the_try_out_postgres_is_a_statefulset_with_its_password_from_a_secret() -> None:
    postgres = objects("StatefulSet", "autotune-postgres")
    (container,) = pod_spec(postgres)["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["POSTGRES_PASSWORD"]["valueFrom"]
    assert postgres["spec"]["volumeClaimTemplates"]
    assert objects("Service", "autotune-postgres")["spec"]["ports"][0]["port"] == 5432


@pytest.mark.parametrize(
    "name_and_container", list(autotune_containers()), ids=lambda nc: f"{nc[0]}/{nc[1]['name']}"
)
def test_every_autotune_command_line_parses_against_the_cli(
    name_and_container: tuple[str, dict[str, Any]],
) -> None:
    _, container = name_and_container
    assert "command" not in container  # the images' entry point is `autotune`
    parse_command_line(container["args"])
    unknown = {e["name"] for e in container.get("env", [])} - known_environment()
    assert not {n for n in unknown if n.startswith("AUTOTUNE_")}, unknown


def test_a_wrong_option_fails_the_command_line_check() -> None:
    with pytest.raises(USAGE_ERROR):
        parse_command_line(["worker", "--devices", "cuda:0"])
    with pytest.raises(AssertionError):
        parse_command_line(["workers", "--device", "cuda:0"])


# -- Slurm -------------------------------------------------------------------------------------


def sbatch_directives() -> dict[str, str]:
    lines = [line for line in SBATCH.read_text().splitlines() if line.startswith("#SBATCH ")]
    return dict(line.removeprefix("#SBATCH ").split("=", 1) for line in lines)


def sbatch_worker_line() -> list[str]:
    """The ``autotune worker ...`` command line the script's srun starts, as words."""
    (inner,) = re.findall(r"^\s*(exec autotune .*)$", SBATCH.read_text(), re.MULTILINE)
    words = shlex.split(inner.replace("${gpu}", "0"))
    assert words[:2] == ["exec", "autotune"]
    return words[2:]


def test_the_sbatch_script_is_valid_bash_and_starts_a_worker_per_gpu() -> None:
    checked = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    directives = sbatch_directives()
    # As many tasks per node as GPUs, each task's worker on the GPU of its node-local rank.
    assert directives["--gres"] == f"gpu:{directives['--ntasks-per-node']}"
    args = sbatch_worker_line()
    assert parse_command_line(args).params["device"] == "cuda:0"
    assert "gpu=${SLURM_LOCALID}" in SBATCH.read_text()
    # SIGTERM before the time limit, so that each worker requeues its job.
    assert directives["--signal"].startswith("TERM@")


def srun_body() -> str:
    """The script each of srun's tasks runs (the single-quoted ``bash -c`` argument)."""
    (body,) = re.findall(r"srun [^']*bash -c '([^']*)'", SBATCH.read_text())
    return body


@pytest.mark.parametrize(
    ("visible", "local_id", "device"),
    [("0,1,2,3", "2", "cuda:2"), ("", "1", "cuda:1"), ("5", "3", "cuda:0")],
    ids=["node's GPUs visible", "no CUDA_VISIBLE_DEVICES", "bound per task"],
)
def test_each_srun_task_picks_its_own_gpu(visible: str, local_id: str, device: str) -> None:
    shown = subprocess.run(
        ["bash", "-c", srun_body().replace("exec autotune", "echo autotune")],
        env={
            "PATH": os.environ["PATH"],
            "CUDA_VISIBLE_DEVICES": visible,
            "SLURM_LOCALID": local_id,
        },
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.split()[:4] == ["autotune", "worker", "--device", device]


# -- the same command lines, through the installed command's own --help ----------------------


def command_lines() -> list[list[str]]:
    return [c["args"] for _, c in autotune_containers()] + [sbatch_worker_line()]


@pytest.mark.slow  # a few seconds an interpreter
@pytest.mark.parametrize("args", command_lines(), ids=lambda a: " ".join(a[:2]))
def test_every_option_is_listed_by_the_real_help(args: list[str]) -> None:
    subcommand, options = options_of(args)
    shown = subprocess.run(
        [*AUTOTUNE, *subcommand, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert shown.returncode == 0, shown.stderr
    listed = set(re.findall(r"--[a-z][a-z-]*", shown.stdout))
    assert set(options) <= listed, (
        f"`autotune {' '.join(subcommand)}` lacks {set(options) - listed}"
    )
