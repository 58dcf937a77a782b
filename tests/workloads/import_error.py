"""A workload file that fails to import."""

import package_that_does_not_exist_xyz  # noqa: F401

from autotune.workload._contract import Workload


def workload() -> Workload:
    raise AssertionError("unreachable: the import above fails")
