"""Is a process (or process group) still there, and waiting until something holds: one answer for
the sweep's run states, the vLLM server's start-up and shutdown, and the cleanup of exported weights
left by dead trainers."""

from __future__ import annotations

import os
import time
from typing import Callable


def pid_alive(pid: int | None) -> bool:
    """True when process ``pid`` exists (also when it belongs to another user); False for None/0."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_alive(pgid: int) -> bool:
    """True while any process of group ``pgid`` exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_until(condition: Callable[[], bool], timeout_s: float, interval_s: float) -> bool:
    """Poll ``condition`` every ``interval_s`` until it holds (True) or ``timeout_s`` has passed
    (False); it is always tried at least once, and again right at the deadline. Exceptions it raises
    propagate (a condition can fail fast, e.g. when the process it waits for has died)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(interval_s, left))
