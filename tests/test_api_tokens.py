"""Named API tokens with roles, jobs' submitters, and cross-site writes to a token-less server.

Against real worker-less ``autotune serve`` processes: one with a tokens file (and the single
``AUTOTUNE_API_TOKEN`` as its admin), one without tokens.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import typer
from autotune_api.settings import load_settings
from conftest_service import AUTOTUNE, Service, clean_env, start_service
from typer.testing import CliRunner

from autotune.cli._token import register
from autotune.errors import ConfigError
from autotune.service import caller_of, hash_token, parse_tokens, read_tokens_file, token_weakness

ADMIN = "correct-horse-battery-staple"
READER = "reader-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefghij"


def autotune_token_new(name: str, role: str) -> tuple[str, str]:
    """``autotune token new NAME --role ROLE``, in process: the token and the file's line."""
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["token", "new", name, "--role", role])
    assert result.exit_code == 0, result.output
    token, line = result.stdout.splitlines()
    return token, line


@pytest.fixture(scope="module")
def alice() -> tuple[str, str]:
    return autotune_token_new("alice", "submit")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, alice: tuple[str, str]) -> Iterator[Service]:
    directory = tmp_path_factory.mktemp("tokens")
    tokens_file = directory / "tokens"
    tokens_file.write_text(
        "# name role sha256\n"
        f"{alice[1]}\n"
        f"reader read {hash_token(READER)}\n"
        f"bob submit {hash_token(BOB)}\n"
    )
    running = start_service(
        directory, env={"AUTOTUNE_API_TOKENS_FILE": str(tokens_file), "AUTOTUNE_API_TOKEN": ADMIN}
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tokenless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(tmp_path_factory.mktemp("tokenless"))
    yield running
    running.stop()


def submit(service: Service, token: str) -> httpx.Response:
    with service.client(token) as client:
        return client.post("/v1/jobs", json={"workload": "tiny", "fresh": True})


def cancel(service: Service, token: str, job_id: int) -> httpx.Response:
    with service.client(token) as client:
        return client.post(f"/v1/jobs/{job_id}/cancel")


# -- roles and owners ------------------------------------------------------------------------


def test_a_read_token_reads_but_cannot_submit(guarded: Service) -> None:
    with guarded.client(READER) as client:
        assert client.get("/v1/jobs").status_code == 200
        # refused before its body is read, whatever the body holds
        assert client.post("/v1/jobs", json={"workload": "nope", "n_trials": -1}).status_code == 403
    response = submit(guarded, READER)
    assert response.status_code == 403
    assert response.json()["detail"] == (
        "the token 'reader' has the role read, which may not submit jobs; ask the server's "
        "admin for a token with the role submit"
    )


def test_a_token_from_autotune_token_new_submits_and_the_job_records_it(
    guarded: Service, alice: tuple[str, str]
) -> None:
    response = submit(guarded, alice[0])
    assert response.status_code == 202, response.text
    assert response.json()["submitted_by"] == "alice"
    with guarded.client(READER) as client:
        listed = client.get("/v1/jobs").json()["data"]
    assert {job["id"]: job["submitted_by"] for job in listed}[response.json()["id"]] == "alice"


def test_only_the_submitter_or_an_admin_cancels_a_job(
    guarded: Service, alice: tuple[str, str]
) -> None:
    first, second = (submit(guarded, alice[0]).json()["id"] for _ in range(2))

    refused = cancel(guarded, BOB, first)
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        f"job {first} was submitted by alice, so the token 'bob' may not cancel it; ask its "
        "submitter or an admin"
    )
    assert cancel(guarded, READER, first).status_code == 403
    with guarded.client(READER) as client:
        assert client.get(f"/v1/jobs/{first}").json()["status"] == "queued"

    owned = cancel(guarded, alice[0], first)
    assert (owned.status_code, owned.json()["status"]) == (202, "cancelled")
    by_admin = cancel(guarded, ADMIN, second)
    assert (by_admin.status_code, by_admin.json()["status"]) == (202, "cancelled")


def test_the_single_api_token_is_an_admin_named_admin(guarded: Service) -> None:
    response = submit(guarded, ADMIN)
    assert response.status_code == 202
    assert response.json()["submitted_by"] == "admin"


@pytest.mark.parametrize("token", ["", "wrong-token-0123456789abcdef", f"{READER}x", BOB[:-1]])
def test_a_wrong_token_is_401(guarded: Service, token: str) -> None:
    with guarded.client(token) as client:
        for response in (client.get("/v1/jobs"), client.post("/v1/jobs/1/cancel")):
            assert response.status_code == 401
            assert response.json()["detail"].startswith("missing or wrong bearer token; send")


# -- token-less mode: cross-site writes ------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://attacker.example"},
        {"origin": "null"},
        {"origin": "http://127.0.0.1:1"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ],
)
def test_without_tokens_a_cross_site_write_is_refused(
    tokenless: Service, headers: dict[str, str]
) -> None:
    job_id = submit(tokenless, "").json()["id"]
    with tokenless.client() as client:
        refused = client.post(f"/v1/jobs/{job_id}/cancel", headers=headers)
        assert refused.status_code == 403
        assert refused.json()["detail"].startswith(
            "this server has no token, so it refuses writes sent by another site's page"
        )
        assert client.post("/v1/jobs", json={"workload": "tiny"}, headers=headers).status_code == (
            403
        )
        assert client.get(f"/v1/jobs/{job_id}", headers=headers).json()["status"] == "queued"


def test_without_tokens_a_same_origin_write_is_let_in_as_the_local_admin(
    tokenless: Service,
) -> None:
    submitted = submit(tokenless, "")
    assert submitted.json()["submitted_by"] == "local"
    headers = {"origin": tokenless.base_url, "sec-fetch-site": "same-origin"}
    with tokenless.client() as client:
        response = client.post(f"/v1/jobs/{submitted.json()['id']}/cancel", headers=headers)
    assert (response.status_code, response.json()["status"]) == (202, "cancelled")


# -- tokens and tokens files refused at start -----------------------------------------------


@pytest.mark.parametrize(
    ("token", "weakness"),
    [
        (" " * 16, "contains whitespace"),
        ("a" * 40, "has fewer than 10 distinct characters"),
        ("0123456789" + "abc", "is shorter than 16 characters"),
        ("correct horse battery staple", "contains whitespace"),
    ],
)
def test_a_weak_token_is_refused(token: str, weakness: str) -> None:
    assert token_weakness(token) == weakness
    with pytest.raises(ConfigError, match=f"AUTOTUNE_API_TOKEN {weakness}; use a random one"):
        load_settings(api_token=token)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (f"alice submit {ADMIN}", "does not hold a sha256 hex digest (a plaintext token?)"),
        (ADMIN, "has 1 fields, not NAME ROLE SHA256-HEX"),
        (f"alice {hash_token(ADMIN)}", "has 2 fields, not NAME ROLE SHA256-HEX"),
        (f"alice owner {hash_token(ADMIN)}", "gives the role 'owner'; use one of read, submit"),
        (f"al/ice read {hash_token(ADMIN)}", "names a token 'al/ice', not 1 to 64 letters"),
    ],
)
def test_a_tokens_file_with_a_bad_line_is_refused(tmp_path: Path, line: str, message: str) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"# tokens\n\n{line}\n")
    expected = re.escape(f"{tokens_file} line 3 {message}")
    with pytest.raises(ConfigError, match=expected):
        read_tokens_file(tokens_file)
    with pytest.raises(ConfigError, match=expected):
        load_settings(api_tokens_file=tokens_file)


def test_a_tokens_file_refuses_repeated_names_and_the_admin_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="line 2 repeats the token name 'bob'"):
        parse_tokens(f"bob read {hash_token(BOB)}\nbob admin {hash_token(READER)}", "f")
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"admin read {hash_token(READER)}\n")
    with pytest.raises(ConfigError, match="names a token 'admin', the name AUTOTUNE_API_TOKEN"):
        load_settings(api_tokens_file=tokens_file, api_token=ADMIN)
    tokens_file.write_text("# nobody yet\n")
    with pytest.raises(ConfigError, match="holds no token; add a line"):
        load_settings(api_tokens_file=tokens_file)


def test_a_token_matches_only_its_own_hash() -> None:
    tokens = parse_tokens(f"reader read {hash_token(READER)}\nbob submit {hash_token(BOB)}", "f")
    assert [caller_of(tokens, given) for given in (READER, BOB, ADMIN, "")] == [
        tokens[0],
        tokens[1],
        None,
        None,
    ]


def test_a_tokens_file_allows_a_public_address(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"bob submit {hash_token(BOB)}\n")
    settings = load_settings(host="0.0.0.0", api_tokens_file=tokens_file)
    assert settings.has_tokens() and settings.trusted_hosts() == ["*"]
    assert [token.name for token in settings.tokens()] == ["bob"]


@pytest.mark.slow
def test_serve_refuses_to_start_with_a_plaintext_token_in_its_tokens_file(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"alice submit {ADMIN}\n")
    result = subprocess.run(
        [*AUTOTUNE, "serve", "--db", str(tmp_path / "x.db"), "--no-worker"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(AUTOTUNE_API_TOKENS_FILE=str(tokens_file)),
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"autotune: error: {tokens_file} line 1 does not hold a sha256 hex digest (a plaintext "
        "token?); store only the hash, as `autotune token new NAME --role ROLE` prints it"
    )
