"""Is a process (or process group) still there? One answer for the sweep's run states, the vLLM
server's shutdown and the cleanup of exported weights left by dead trainers."""

from __future__ import annotations

import os


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
