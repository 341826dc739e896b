"""Wall-clock accounting for the trainer: named phases, and the time JAX spends compiling."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict

import jax

_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class PhaseTimer:
    """Accumulates seconds per phase (``with timer("sampling"): ...``) and the compile time JAX
    reports through ``jax.monitoring`` while the timer is open; ``take()`` returns and resets."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = defaultdict(float)
        self._compile = 0.0
        self._listening = False

    def _on_event(self, event: str, duration: float, **_) -> None:
        if event in _COMPILE_EVENTS:
            self._compile += duration

    def open(self) -> PhaseTimer:
        if not self._listening:
            jax.monitoring.register_event_duration_secs_listener(self._on_event)
            self._listening = True
        return self

    def close(self) -> None:
        if self._listening:
            jax.monitoring.unregister_event_duration_listener(self._on_event)
            self._listening = False

    @contextlib.contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[phase] += time.perf_counter() - start

    def take(self) -> dict[str, float]:
        out = dict(self._seconds)
        out["compile"] = self._compile
        self._seconds.clear()
        self._compile = 0.0
        return out
