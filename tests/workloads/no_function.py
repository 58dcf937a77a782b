"""A workload file that defines no ``workload`` function."""

NOT_A_WORKLOAD = 42
