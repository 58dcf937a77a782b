"""A workload file whose ``workload()`` returns something that is not a Workload."""


def workload() -> int:
    return 42
