"""The host-memory sampler on real process trees: it counts shared pages once (PSS), follows
growth, and walks the page tables (PSS) only when resident memory grew, not at every sample."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator

import pytest
from conftest_service import wait_for

from autotune.measure import _host_memory as host_memory

pytestmark = pytest.mark.slow

MIB = 2**20

StartTree = Callable[..., "subprocess.Popen[str]"]

#: A parent that fills ``SHARED`` MiB, then forks ``CHILDREN`` children that sleep on those
#: pages (copy-on-write, never written again): each child's RSS counts them in full, PSS once
#: over the tree. On a line on stdin the parent fills ``GROW`` MiB more.
_TREE = textwrap.dedent("""
    import os, sys, time
    SHARED, CHILDREN, GROW = (int(a) for a in sys.argv[1:4])
    data = b"x" * (SHARED << 20)
    for _ in range(CHILDREN):
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
    print("ready", flush=True)
    sys.stdin.readline()
    more = b"y" * (GROW << 20)
    print("grown", flush=True)
    time.sleep(120)
""")


@pytest.fixture
def start_tree() -> Iterator[StartTree]:
    started: list[subprocess.Popen[str]] = []

    def start(shared_mib: int, children: int, grow_mib: int = 0) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", _TREE, str(shared_mib), str(children), str(grow_mib)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        started.append(process)
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        time.sleep(0.2)  # the children are forked before "ready"; let them settle
        return process

    yield start
    for process in started:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_pages_shared_by_forked_children_count_once_against_the_budget(
    start_tree: StartTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_memory, "MIN_INTERVAL_S", 0.02)
    tree = start_tree(shared_mib=200, children=3)
    rss = sum(host_memory.process_rss_bytes(pid) for pid in host_memory.tree_pids(tree.pid))
    assert rss > 800 * MIB  # four processes each resident on the 200 MiB
    over: list[int] = []
    with host_memory.TreeMemorySampler(
        tree.pid, budget_bytes=500 * MIB, on_over_budget=over.append
    ) as sampler:
        # Counted samples, not a fixed sleep: the sampler's thread runs at the lowest priority,
        # and on a busy machine its samples come late.
        wait_for(lambda: sampler.samples >= 5, 30, "the sampler's samples")
    assert not over, f"the tree read {over[0] / MIB:.0f} MiB against a 500 MiB budget"
    assert 200 * MIB < sampler.peak_bytes < 400 * MIB, sampler.peak_bytes / MIB


def test_a_steady_tree_is_read_by_its_counters_and_its_growth_by_its_page_tables(
    start_tree: StartTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_memory, "MIN_INTERVAL_S", 0.02)
    tree = start_tree(shared_mib=50, children=1, grow_mib=300)
    with host_memory.TreeMemorySampler(tree.pid) as sampler:
        wait_for(lambda: sampler.samples >= 10, 30, "the sampler's samples")
        steady_samples, steady_reads = sampler.samples, sampler.pss_reads
        assert tree.stdin is not None and tree.stdout is not None
        tree.stdin.write("grow\n")
        tree.stdin.flush()
        assert tree.stdout.readline() == "grown\n"
        wait_for(
            lambda: sampler.samples >= steady_samples + 10,
            30,
            "the sampler's samples after the growth",
        )
    assert steady_reads <= 2, f"{steady_reads} of {steady_samples} samples walked page tables"
    assert sampler.pss_reads > steady_reads
    assert sampler.peak_bytes > 350 * MIB, sampler.peak_bytes / MIB
