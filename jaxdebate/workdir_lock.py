"""One trainer per workdir: a lock file naming its holder (pid, host), taken before anything is
loaded. A lock whose process is gone (same host, dead pid) is stale and taken over; one held by a
live process, or by another host, makes the second trainer fail with one line naming the holder."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from jaxdebate.errors import RunError
from jaxdebate.processes import pid_alive

LOCK_FILE = ".jaxdebate.lock"


def _holder(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # vanished, or half-written by a holder that is creating it right now


class WorkdirLock:
    """``with WorkdirLock(workdir):`` holds ``workdir/.jaxdebate.lock`` for this process."""

    def __init__(self, workdir: str | Path) -> None:
        self.path = Path(workdir) / LOCK_FILE
        self.held = False

    def acquire(self) -> WorkdirLock:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "argv": sys.argv}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # a stale lock is removed, then created afresh (O_EXCL: one process wins)
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _holder(self.path)
                if holder is None:
                    time.sleep(0.2)
                    holder = _holder(self.path)
                if holder is not None and not self._stale(holder):
                    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
                    elsewhere = "" if holder.get("host") == socket.gethostname() else (
                        f"; a process on another host cannot be checked from here: if it is gone (a node "
                        f"lost to a hard kill), delete {self.path}")
                    raise RunError(f"{self.path.parent} is in use by pid {holder.get('pid')} on "
                                   f"{holder.get('host')} (since {since}); wait for it, stop it, or use "
                                   f"another --workdir{elsewhere}") from None
                if holder is not None:
                    print(f"[jaxdebate] removing the stale lock of pid {holder.get('pid')} "
                          f"(no longer running) in {self.path.parent}", file=sys.stderr)
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise RunError(f"could not take the lock {self.path}: it keeps reappearing")

    @staticmethod
    def _stale(holder: dict) -> bool:
        if holder.get("host") != socket.gethostname():
            return False  # another host's pid cannot be checked from here
        return not pid_alive(holder.get("pid"))

    def release(self) -> None:
        if self.held:
            holder = _holder(self.path)
            if holder is not None and holder.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> WorkdirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
