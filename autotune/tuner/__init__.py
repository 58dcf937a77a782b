"""Running a tuning job end to end: the one library call behind the CLI and the API."""

from autotune.tuner._bench import bench, read_config
from autotune.tuner._job import JobCancelled, run_job
from autotune.tuner._options import CONFIRM_WINDOW_FACTOR, TuneOptions, parse_memory
from autotune.tuner._remembered import answer_key, remembered_answer
from autotune.tuner._reporter import Reporter
from autotune.tuner._stored import create_job, load_job

__all__ = [
    "CONFIRM_WINDOW_FACTOR",
    "JobCancelled",
    "Reporter",
    "TuneOptions",
    "answer_key",
    "bench",
    "create_job",
    "load_job",
    "parse_memory",
    "read_config",
    "remembered_answer",
    "run_job",
]
