"""One core for each pytest-xdist worker, and the whole machine for tests that need it.

Two workers on two cores each ran JAX (and vLLM) thread pools sized for the whole machine, and their
threads competed for both cores; a worker pinned to a core of its own, with what it starts, ran the suite
in less time (bench/README "The test suite's time"). ``JAXDEBATE_TEST_PIN=0`` turns it off.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

PIN_ENV = "JAXDEBATE_TEST_PIN"
CORES_ENV = "JAXDEBATE_TEST_CORES"  # the cores the session was given, before any pinning
_CAN_PIN = hasattr(os, "sched_setaffinity")  # Linux; elsewhere the workers share every core as before


def pin_worker() -> None:
    """Pin this xdist worker to one of the session's cores (worker ``gwN`` to the N-th, modulo their
    number); children inherit it. Nothing happens outside xdist (``-n 0``) or with the switch off."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or os.environ.get(PIN_ENV, "1") == "0" or not _CAN_PIN:
        return
    cores = sorted(os.sched_getaffinity(0))
    os.environ.setdefault(CORES_ENV, ",".join(map(str, cores)))
    os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})


def session_cores() -> set[int]:
    """The cores the test session was started with (this process's own where nothing was pinned)."""
    given = os.environ.get(CORES_ENV)
    return {int(c) for c in given.split(",")} if given else set(os.sched_getaffinity(0))


@contextmanager
def whole_machine() -> Iterator[None]:
    """Processes started inside run on every core of the session: the calling thread's affinity is
    widened (a child inherits its parent thread's) and restored on exit; the worker's other threads
    stay where they are."""
    if not _CAN_PIN:
        yield
        return
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, session_cores())
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
