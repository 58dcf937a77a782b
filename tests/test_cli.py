"""The ``autotune`` command line, run as a user runs it: a real process, a real SQLite file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import psutil
import pytest
import torch
from conftest import rows

import autotune as autotune_package
from autotune.cli import EXIT_CODES, exit_code_of
from autotune.errors import ConfigError, NoFeasibleConfigError, StoreError, WorkloadError
from autotune.recommend import validate_recommendation
from autotune.tuner._budget import MIN_CONFIRM_ENTRIES, confirm_room

#: The profile (about 10 s a job) and torch.compile (15 s and more a compiled trial) have their
#: own tests (test_profile.py, test_compile.py).
FAST_FLAGS = [
    "--min-seconds",
    "0.3",
    "--min-steps",
    "3",
    "--warmup-steps",
    "1",
    "--confirm-top",
    "1",
    "--confirm-rounds",
    "1",
    "--no-profile",
    "--fix",
    "compile=off",
]


def autotune(
    *args: str, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def assert_clear_error(
    result: subprocess.CompletedProcess[str], phrase: str, exit_code: int = 2
) -> None:
    """One line on stderr naming ``phrase``, no traceback, and the exit code of its kind (2:
    invalid input)."""
    assert result.returncode == exit_code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("autotune: error: ")
    assert phrase in lines[0]


@pytest.mark.slow
def test_workloads_lists_the_builtins() -> None:
    result = autotune("workloads")
    assert result.returncode == 0
    for name in ("image-cnn", "text-transformer", "slow-storage"):
        assert f"builtin:{name}" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["missing_file.py"], "does not exist"),
        (["builtin:no-such-thing"], "unknown built-in workload"),
        (["WORKLOADS/import_error.py"], "failed to import: ModuleNotFoundError"),
        (["WORKLOADS/no_function.py"], "has no function 'workload'"),
        (["WORKLOADS/bad_return.py"], "returned int, expected autotune.Workload"),
        (["WORKLOADS/tiny.py", "--fix", "colour=blue"], "unknown knob 'colour'"),
        (["WORKLOADS/tiny.py", "--fix", "batch_size=0"], "batch_size 0 is not positive"),
        (["WORKLOADS/tiny.py", "--range", "batch_size=8..100"], "multiple of 8"),
        (
            ["WORKLOADS/tiny.py", "--fix", "pin_memory=true", "--device", "cpu"],
            "only has an effect on a CUDA device",
        ),
        (["WORKLOADS/tiny.py", "--max-memory", "10MB", "--device", "cpu"], "below the"),
        (["WORKLOADS/tiny.py", "--max-memory", "lots"], "is not a size"),
        (["WORKLOADS/tiny.py", "--trials", "0"], "--n-trials"),
    ],
)
def test_bad_input_is_one_clear_line_and_a_non_zero_exit(
    args: list[str], phrase: str, db_path: str, workload_file
) -> None:
    args = [a.replace("WORKLOADS/", str(Path(workload_file("tiny")).parent) + "/") for a in args]
    result = (
        autotune("run", *args, "--db", db_path, "--trials", "2", *FAST_FLAGS)
        if "--trials" not in args
        else autotune("run", *args, "--db", db_path, *FAST_FLAGS)
    )
    assert_clear_error(result, phrase)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["run", "builtin:image-cnn", "--output", "x.json"], "No such option: --output"),
        (["run"], "Missing argument"),
        (["run", "builtin:image-cnn", "--trials", "many"], "Invalid value for '--trials'"),
        (["jobs", "--bogus"], "No such option: --bogus"),
    ],
)
def test_a_mistyped_command_line_is_the_usage_and_exit_2(args: list[str], phrase: str) -> None:
    """What the command-line parser refuses is its usage line and one error, not a traceback
    (typer 0.29 raises the exceptions of its own copy of click, which main() must know)."""
    result = autotune(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert f"Error: {phrase}" in result.stderr
    assert "--help' for help" in result.stderr


@pytest.mark.slow
def test_debug_shows_the_traceback(db_path: str, workload_file) -> None:
    result = autotune("run", workload_file("bad_return"), "--db", db_path, "--debug")
    assert result.returncode != 0
    assert "Traceback" in result.stderr


@pytest.mark.slow
def test_run_end_to_end_writes_a_valid_recommendation(tmp_path: Path, workload_file) -> None:
    db, out = str(tmp_path / "a.db"), tmp_path / "best.json"
    flags = list(FAST_FLAGS)
    flags[flags.index("--confirm-rounds") + 1] = "2"  # two runs each: their spread is given
    result = autotune(
        "run",
        workload_file("tiny"),
        "--trials",
        "4",
        "--db",
        db,
        "--out",
        str(out),
        "--device",
        "cpu",
        *flags,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    validate_recommendation(document)
    assert document["workload"] == "tiny"
    assert document["device"]["type"] == "cpu"
    assert document["baseline"]["config"]["num_workers"] == 0
    assert document["trials"]["total"] == len(rows(db, "select id from autotune_trials"))
    # The widest spread of one configuration's confirmation runs is given, and the verdict
    # speaks of it exactly when it is unsteady.
    spread = document["run_spread"]
    assert spread["min"] <= spread["max"] and spread["ratio"] == spread["max"] / spread["min"]
    assert spread["unsteady"] == ("speed moved" in document["verdict"])
    # Progress rows and the summary are shown, on stderr.
    assert "#1" in result.stderr and "baseline" in result.stderr and "recommended" in result.stderr
    # The Optuna study lives in the same database (optuna-dashboard can open it).
    assert rows(db, "select study_name from studies") == [("autotune-job-1",)]
    # Not applicable on a CPU: never searched, never set.
    assert document["search_space"]["not_applicable"]["pin_memory"]
    assert all(
        json.loads(c)["pin_memory"] is False
        for (c,) in rows(db, "select config from autotune_trials")
    )


@pytest.mark.slow
def test_a_time_budget_shorter_than_the_confirmation_still_measures_the_baseline(
    tmp_path: Path, workload_file
) -> None:
    """A budget that the confirmation's estimate alone exceeds ends the search after the
    baseline, not before it: the job recommends (the baseline) instead of failing unmeasured."""
    db, out = str(tmp_path / "a.db"), tmp_path / "best.json"
    result = autotune(
        "run",
        workload_file("tiny"),
        "--trials",
        "4",
        "--time-budget",
        "1",
        "--db",
        db,
        "--out",
        str(out),
        "--device",
        "cpu",
        *FAST_FLAGS,
    )
    assert result.returncode == 0, result.stderr
    searched = rows(db, "select phase from autotune_trials where phase != 'confirm'")
    assert searched == [("baseline",)]
    validate_recommendation(json.loads(out.read_text()))


def test_a_time_budget_trims_the_confirmation_before_it_stops_the_search() -> None:
    """The search runs while the time left covers confirming its best beside the baseline;
    the confirmation then takes the candidates the time left covers. (The whole confirmation
    reserved up front, 5 entries x 3 rounds of 16 s, ended a 170 s job after its baseline.)"""
    assert MIN_CONFIRM_ENTRIES == 2
    assert confirm_room(seconds_left=100, seconds_per_entry=3 * 16) == 1
    assert confirm_room(seconds_left=200, seconds_per_entry=3 * 16) == 3
    assert confirm_room(seconds_left=5, seconds_per_entry=3 * 16) == 1


@pytest.mark.slow
def test_memory_budget_is_respected_and_oom_bounds_larger_batches(
    tmp_path: Path, workload_file
) -> None:
    db, out = str(tmp_path / "m.db"), tmp_path / "best.json"
    result = autotune(
        "run",
        workload_file("memory_hog"),
        "--trials",
        "6",
        "--db",
        db,
        "--out",
        str(out),
        "--device",
        "cpu",
        "--max-memory",
        "600MiB",
        "--fix",
        "num_workers=0",
        "--range",
        "batch_size=8..512",
        *FAST_FLAGS,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["metrics"]["peak_memory_bytes"] <= 600 * 2**20
    trials = rows(
        db, "select config, outcome from autotune_trials where phase != 'confirm' order by number"
    )
    assert any(outcome == "oom" for _, outcome in trials), (
        "a batch of 512 MiB cannot fit in 600 MiB with the interpreter"
    )
    # Once a batch ran out of memory, no batch at least as large (same amp and optimizer
    # implementation, and glibc keeping at least as much freed memory: without it a larger
    # batch may fit) was run after it.
    ran_out: list[dict] = []
    for config_text, outcome in trials:
        config = json.loads(config_text)
        for earlier in ran_out:
            assert not (
                config["amp"] == earlier["amp"]
                and config["optimizer_impl"] == earlier["optimizer_impl"]
                and config["batch_size"] >= earlier["batch_size"]
                and config["retain_freed_memory"] >= earlier["retain_freed_memory"]
            ), f"batch {config['batch_size']} ran after batch {earlier['batch_size']} ran out"
        if outcome == "oom":
            ran_out.append(config)


def _wait_for_trials(db: str, count: int, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if os.path.exists(db):
            try:
                if len(rows(db, "select id from autotune_trials")) >= count:
                    return
            except Exception:
                pass
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} trials after {deadline_s} s")


def _kill_tree(pid: int) -> None:
    victims = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for victim in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            victim.send_signal(signal.SIGKILL)
    psutil.wait_procs(victims, timeout=10)


@pytest.mark.slow
def test_a_killed_run_resumes_without_losing_or_repeating_trials(
    tmp_path: Path, workload_file
) -> None:
    db = str(tmp_path / "r.db")
    args = [
        "run",
        workload_file("tiny"),
        "--trials",
        "5",
        "--db",
        db,
        "--out",
        str(tmp_path / "best.json"),
        "--device",
        "cpu",
        "--no-prune",
        *FAST_FLAGS,
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "autotune", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_trials(db, 2, 120)
    finally:
        _kill_tree(process.pid)
    before = rows(db, "select id, number, config_key, samples_per_s from autotune_trials")
    assert rows(db, "select status from autotune_jobs") == [("running",)]

    result = autotune(*args, "--resume")
    assert result.returncode == 0, result.stderr
    after = rows(db, "select id, number, config_key, samples_per_s from autotune_trials")
    assert set(before) <= set(after), "a finished trial was lost"
    searched = rows(
        db, "select config_key from autotune_trials where phase != 'confirm' and interrupted = 0"
    )
    keys = [key for (key,) in searched]
    assert len(keys) == len(set(keys)), "a configuration was measured twice"
    assert len(keys) == 5
    assert rows(db, "select status from autotune_jobs") == [("succeeded",)]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_marks_the_job_interrupted_and_says_how_to_resume(
    tmp_path: Path, workload_file
) -> None:
    db = str(tmp_path / "i.db")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotune",
            "run",
            workload_file("tiny"),
            "--trials",
            "20",
            "--db",
            db,
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "best.json"),
            *FAST_FLAGS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as in a terminal: a suite started in the background by a non-interactive
        # shell inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored.
        preexec_fn=_default_sigint,
    )
    _wait_for_trials(db, 1, 120)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "--resume" in stderr
    assert rows(db, "select status from autotune_jobs") == [("interrupted",)]
    assert not psutil.Process().children(recursive=True)


def _tiny_run(tmp_path: Path, workload_file, *flags: str) -> subprocess.CompletedProcess[str]:
    return autotune(
        "run",
        workload_file("tiny"),
        "--trials",
        "2",
        "--db",
        str(tmp_path / "j.db"),
        "--out",
        str(tmp_path / "best.json"),
        "--device",
        "cpu",
        *flags,
        *FAST_FLAGS,
    )


@pytest.mark.slow
def test_json_prints_the_recommendation_alone_on_stdout(tmp_path: Path, workload_file) -> None:
    """`--json`: stdout is the document written to --out and nothing else, for a pipe; the
    progress and the summary are on stderr."""
    result = _tiny_run(tmp_path, workload_file, "--json")
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "best.json").read_text()
    assert result.stdout == written
    assert json.loads(result.stdout) == json.loads(written)
    assert "#1" in result.stderr and "recommended" in result.stderr and "wrote" in result.stderr


@pytest.mark.slow
def test_quiet_shows_nothing_on_success(tmp_path: Path, workload_file) -> None:
    """`--quiet`: no progress, no summary and no "wrote"; the recommendation is still written."""
    result = _tiny_run(tmp_path, workload_file, "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and result.stdout == ""
    validate_recommendation(json.loads((tmp_path / "best.json").read_text()))


@pytest.mark.slow
def test_a_second_run_is_answered_by_the_first_unless_fresh(tmp_path: Path, workload_file) -> None:
    """The same workload, options and device: the stored answer at once, saying so, with no
    new trial (whatever --out says); `--fresh` measures again."""
    db = tmp_path / "j.db"
    first = _tiny_run(tmp_path, workload_file, "--json")
    assert first.returncode == 0, first.stderr
    measured = rows(db, "SELECT count(*) FROM autotune_trials")[0][0]

    second = _tiny_run(tmp_path, workload_file, "--json", "--out", str(tmp_path / "again.json"))
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout == (tmp_path / "again.json").read_text()
    assert "job 1 already answered this workload on this device 0 minutes ago" in second.stderr
    assert "pass --fresh to measure again" in second.stderr
    assert rows(db, "SELECT count(*) FROM autotune_jobs")[0][0] == 1
    assert rows(db, "SELECT count(*) FROM autotune_trials")[0][0] == measured

    fresh = _tiny_run(tmp_path, workload_file, "--fresh", "--quiet")
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stderr == ""
    assert rows(db, "SELECT count(*) FROM autotune_jobs")[0][0] == 2
    assert rows(db, "SELECT count(*) FROM autotune_trials")[0][0] > measured


def test_a_remembered_answer_says_its_age_in_a_unit_that_reads() -> None:
    from autotune.cli._app import _age

    assert [_age(s) for s in (10, 50 * 60, 5 * 3600, 3 * 86400)] == [
        "0 minutes",
        "50 minutes",
        "5 hours",
        "3 days",
    ]


@pytest.mark.slow
def test_bench_remeasures_a_configuration(tmp_path: Path, workload_file) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"config": {"batch_size": 16, "num_workers": 1}}))
    db = str(tmp_path / "b.db")
    result = autotune(
        "bench",
        workload_file("tiny"),
        "--config",
        str(config),
        "--repeats",
        "2",
        "--db",
        db,
        "--device",
        "cpu",
        "--min-seconds",
        "0.3",
        "--min-steps",
        "3",
        "--warmup-steps",
        "1",
    )
    assert result.returncode == 0, result.stderr
    assert "median" in result.stdout and "samples/s" in result.stdout
    assert "#1" in result.stderr and "#1" not in result.stdout  # the progress, on stderr
    assert len(rows(db, "select id from autotune_trials where phase = 'bench'")) == 2


@pytest.mark.slow
def test_bench_refuses_a_bad_config_file(tmp_path: Path, workload_file) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"config": {"batch_size": 0}}))
    result = autotune(
        "bench", workload_file("tiny"), "--config", str(config), "--db", str(tmp_path / "b.db")
    )
    assert_clear_error(result, "not positive")


@pytest.mark.slow
def test_version_flag_prints_the_version_and_exits_0() -> None:
    result = autotune("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"autotune {autotune_package.__version__}"


@pytest.mark.slow
def test_version_command_names_what_a_bug_report_needs() -> None:
    result = autotune("version")
    assert result.returncode == 0, result.stderr
    shown = dict(
        (name.strip(), value.strip())
        for name, value in (line.split(":", 1) for line in result.stdout.splitlines())
    )
    assert shown["autotune"] == autotune_package.__version__
    assert shown["torch"] == torch.__version__
    assert shown["optuna"] == version("optuna")
    assert shown["cuda"] == ("available" if torch.cuda.is_available() else "not available")
    assert shown["device"].startswith("cpu: ") and "cores" in shown["device"]


def test_each_kind_of_error_has_its_own_exit_code() -> None:
    assert exit_code_of(ConfigError("a knob")) == 2
    assert exit_code_of(WorkloadError("no such file")) == 2
    assert exit_code_of(NoFeasibleConfigError("nothing fits")) == 3
    assert exit_code_of(StoreError("cannot open database")) == 1
    assert sorted(EXIT_CODES) == [0, 1, 2, 3, 130]


@pytest.mark.slow
def test_a_workload_whose_every_trial_fails_exits_3(db_path: str, workload_file) -> None:
    result = autotune(
        "run", workload_file("raises"), "--db", db_path, "--trials", "2", "--quiet", *FAST_FLAGS
    )  # --quiet: the error alone on stderr, without the progress
    assert_clear_error(result, "no configuration could be measured", exit_code=3)


def test_the_exit_codes_are_documented_as_they_are() -> None:
    page = (Path(__file__).parent.parent / "docs" / "user" / "cli.md").read_text()
    table = page.split("## Exit codes", 1)[1]
    documented = {
        int(cells[1])
        for line in table.splitlines()
        if (cells := line.split("|"))[1:2] and cells[1].strip().isdigit()
    }
    assert documented == set(EXIT_CODES)
