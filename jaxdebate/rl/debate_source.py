"""Where a training step's debates come from: the next items of the stream, the step's sampling seed,
and the debates played on the sampler, either when the step asks for them or, under
``training.sample_ahead``, on a worker thread while the step before learns (one step off-policy).

A draw moves the stream and the RNG; :class:`Drawn` carries the RNG and the stream position after
it, which is what the run state records once its step completes. A draw made ahead and never used
(a stop) is dropped, and the run resumes from the position before it, so a resumed run draws it
again with the same items and seed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable, Sequence

import jax

from jaxdebate.data import Item, ItemStream
from jaxdebate.debate.batch import DebateBatch
from jaxdebate.rl.step import sampling_seed

Play = Callable[[Sequence[Item], int], DebateBatch]  # (items, seed) -> graded debates


@dataclasses.dataclass(frozen=True)
class Drawn:
    """A step's debates (None on a process that does not sample) with the RNG and the stream
    position after its draw."""

    batch: DebateBatch | None
    rng: jax.Array
    data: dict[str, int]


class DebateSource:
    """Draws each step's items and seed from ``stream`` and plays them with ``play`` (None on the
    processes of a multi-process run that do not sample: they draw, to stay at the same position)."""

    def __init__(self, stream: ItemStream, play: Play | None) -> None:
        self.stream = stream
        self.play = play
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._ahead: tuple[concurrent.futures.Future | None, jax.Array, dict[str, int]] | None = None

    def _draw(self, rng: jax.Array) -> tuple[Sequence[Item], int, jax.Array, dict[str, int]]:
        items = self.stream.next_batch()
        rng, seed = sampling_seed(rng)
        return items, seed, rng, self.stream.state()

    def take(self, rng: jax.Array) -> Drawn:
        """The next step's debates: those started ahead (waiting for them; their error is raised
        here), else drawn from ``rng`` and played now."""
        if self._ahead is not None:
            job, rng_after, data = self._ahead
            self._ahead = None
            return Drawn(job.result() if job is not None else None, rng_after, data)
        items, seed, rng, data = self._draw(rng)
        return Drawn(self.play(items, seed) if self.play is not None else None, rng, data)

    def start(self, rng: jax.Array) -> None:
        """Draw the step after the one in flight from ``rng`` and start playing it on the worker
        thread; the sampler must not be used elsewhere until :meth:`settle` (or ``take``) returns."""
        if self._ahead is not None:
            raise RuntimeError("a draw is already ahead; take it first")
        items, seed, rng, data = self._draw(rng)
        job = None
        if self.play is not None:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sample-ahead")
            job = self._pool.submit(self.play, items, seed)
        self._ahead = (job, rng, data)

    @property
    def ahead(self) -> bool:
        return self._ahead is not None

    def settle(self) -> None:
        """Wait until the debates played ahead are done (they stay ahead); then the sampler is free."""
        if self._ahead is not None and self._ahead[0] is not None:
            concurrent.futures.wait([self._ahead[0]])

    def close(self) -> None:
        """Drop a draw made ahead and wait for its worker to end (close the sampler first, and a job
        still playing fails at its next request); its result or error is dropped with it."""
        self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
