"""A readers-writer lock: the vLLM sampler's ``generate`` calls run concurrently, a weight sync
runs alone (and waits for running calls), so no completion mixes two weight versions."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class ReadWriteLock:
    """Many concurrent ``generate`` calls, or one weight sync, never both."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._writer = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
