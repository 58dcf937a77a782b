"""Choosing what the confirmation re-measures: the fastest configurations the search measured,
less those that are one finding with a faster one (its prefetch twin or its plateau twin).

Confirming two points of one finding costs a run per round and cannot tell them apart, so the
rounds go to configurations that differ (evidence: ``benchmarks/log/``).
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.space import Config
from autotune.store import TrialRecord


def pick_candidates(
    measured: Sequence[TrialRecord], baseline: Config, top: int, run_samples: int | None = None
) -> list[Config]:
    """Of the ``top`` fastest distinct usable configurations other than the baseline, by their
    throughput over a run of ``run_samples`` samples (compile time included), those that are
    not a twin of a faster one: its prefetch twin (see :func:`prefetch_twin`) or its plateau
    twin (see :func:`plateau_twin`).

    A plateau twin left out takes the run of a neighbour read further behind along the same
    knob, should one come up, and that neighbour is set aside in its turn: the plateau rule
    decides how many runs go along a knob, the search's readings which configurations get
    them, the fastest read first, so that the race never confirms a neighbour read further
    behind in place of a twin read closer (evidence: ``benchmarks/log/``)."""

    def speed(run: TrialRecord) -> float:
        return run.samples_per_s_over(run_samples) or 0.0

    readings: dict[str, TrialRecord] = {}
    for run in measured:
        key = run.config.key()
        if run.usable and (key not in readings or speed(run) > speed(readings[key])):
            readings[key] = run
    best = {key: run for key, run in readings.items() if key != baseline.key()}
    ranked = sorted(best.values(), key=speed, reverse=True)
    picked: list[TrialRecord] = []
    #: Plateau twins left out, and candidates whose run a twin took, fastest first.
    set_aside: list[TrialRecord] = []
    for run in ranked[:top]:
        if any(prefetch_twin(run.config, faster.config) for faster in picked):
            continue
        if any(
            plateau_twin(
                run.config,
                speed(run),
                faster.config,
                speed(faster),
                [
                    speed(between)
                    for between in readings.values()
                    if _lies_between(between.config, run.config, faster.config)
                ],
            )
            for faster in picked
        ):
            set_aside.append(run)
            continue
        closer = next(
            (aside for aside in set_aside if _along_one_knob(aside.config, run.config, picked)),
            None,
        )
        if closer is not None:
            set_aside.remove(closer)
            set_aside.append(run)
            run = closer
        picked.append(run)
    return [run.config for run in picked]


def _along_one_knob(one: Config, other: Config, picked: Sequence[TrialRecord]) -> bool:
    """Whether the two differ from one of ``picked`` in one knob, the same."""
    lines = {_line(one, faster.config) for faster in picked} - {None}
    return any(_line(other, faster.config) in lines for faster in picked)


def _line(config: Config, other: Config) -> tuple[str, str] | None:
    """``other`` and the knob ``config`` differs from it in, where that is one knob."""
    knobs = differing_knobs(config, other)
    return (other.key(), knobs.pop()) if len(knobs) == 1 else None


#: Two of the best measured that differ in one knob are one finding when the slower read at
#: least this share of the faster: within a trial's run-to-run spread (about 5%, see
#: ``benchmarks/RESULTS.md``).
PLATEAU_SHARE = 0.95


def plateau_twin(
    config: Config, speed: float, other: Config, other_speed: float, between: Sequence[float] = ()
) -> bool:
    """Whether ``config`` differs from ``other``, measured faster, in one knob only and read
    within :data:`PLATEAU_SHARE` of it, as did every point measured between them along that
    knob (``between``, see :func:`_lies_between`): two points of one plateau of the space.

    The search's climb measures the best's neighbours along each knob, and where the speed is
    flat along one (batch sizes past the point where the step stops gaining), they fill the
    best measured; confirming each costs a run per round and cannot tell them apart, so the
    race would run all its rounds on them (evidence: ``benchmarks/log/``). The faster measured
    is confirmed, at a loss of at most the gap the confirmation could not have shown. A
    neighbour read further behind along the same knob is confirmed as well, but the twin takes
    its run (see :func:`pick_candidates`); one that differs in more than one knob, where the
    search found a second region of the space, is confirmed.

    Loading in the main process and loading with workers differ in the worker count alone:
    the workers' own knobs (:data:`WORKER_KNOBS`) mean nothing without them.

    Two peaks with a dip between them are no plateau: a reading between them under the share
    means the two are separate findings, and leaving one out could drop the faster of them.
    """
    if other_speed <= 0 or speed < PLATEAU_SHARE * other_speed:
        return False
    if any(reading < PLATEAU_SHARE * other_speed for reading in between):
        return False
    return len(differing_knobs(config, other)) == 1


def _lies_between(config: Config, one: Config, other: Config) -> bool:
    """Whether ``config`` differs from ``one`` and ``other`` in the one numeric knob they
    differ in, and lies strictly between their values of it."""
    knobs = differing_knobs(one, other)
    if len(knobs) != 1 or differing_knobs(config, one) != knobs:
        return False
    knob = knobs.pop()
    low, high, value = (getattr(c, knob) for c in (one, other, config))
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high, value)):
        return False
    return min(low, high) < value < max(low, high)


#: Knobs of how workers load, which a configuration without workers does not use.
WORKER_KNOBS = frozenset({"prefetch_factor", "persistent_workers"})


def differing_knobs(config: Config, other: Config) -> set[str]:
    """The knobs the two set otherwise, leaving out :data:`WORKER_KNOBS` where either has no
    workers."""
    mine, theirs = config.public_dict(), other.public_dict()
    differ = {name for name in mine if mine[name] != theirs[name]}
    return differ - WORKER_KNOBS if not (config.num_workers and other.num_workers) else differ


def prefetch_twin(config: Config, other: Config) -> bool:
    """Whether the two differ in how many batches each worker queues ahead and in nothing else.

    Twins among the best measured are mostly one point of what the search found, and
    confirming both costs a run per round that cannot tell them apart (evidence:
    ``benchmarks/log/``). The faster measured of the two is confirmed: where twins do differ,
    the search's runs mostly say so already. Where their gap is within the search's spread,
    the slower may be confirmed, at a loss of about that gap.
    """
    if config.num_workers == 0 or config.key() == other.key():
        return False
    unset = {"prefetch_factor": None}
    return config.model_copy(update=unset).key() == other.model_copy(update=unset).key()
