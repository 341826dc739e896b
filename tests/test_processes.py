"""jaxdebate.processes: liveness of real processes and groups, and the one polling helper."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jaxdebate.processes import group_alive, pid_alive, wait_until


def test_liveness_of_a_real_process_and_its_group():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert pid_alive(proc.pid) and group_alive(proc.pid)
        assert pid_alive(os.getpid()) and not pid_alive(None) and not pid_alive(0)
    finally:
        proc.kill()
        proc.wait()
    assert not pid_alive(proc.pid)
    assert wait_until(lambda: not group_alive(proc.pid), 5.0, 0.05)


def test_wait_until_polls_until_true_or_the_deadline():
    calls = []

    def third_time():
        calls.append(time.monotonic())
        return len(calls) == 3

    assert wait_until(third_time, 5.0, 0.01) and len(calls) == 3
    start = time.monotonic()
    calls.clear()
    assert not wait_until(lambda: calls.append(1) and False, 0.2, 0.05)
    assert 0.2 <= time.monotonic() - start < 2.0 and len(calls) >= 3  # tried again at the deadline
    assert wait_until(lambda: True, 0.0, 1.0)  # always tried once, even with no time


def test_wait_until_lets_the_condition_fail_fast():
    def dead():
        raise RuntimeError("the server exited with code 1")

    with pytest.raises(RuntimeError, match="exited with code 1"):
        wait_until(dead, 60.0, 1.0)
