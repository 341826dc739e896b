"""Deterministic, resumable batches of items, and a seeded held-out split.

The order of epoch ``e`` is a permutation drawn from ``(seed, e)`` alone, so a stream restored from
``state()`` yields exactly the batches the original would have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from jaxdebate.data.items import Item
from jaxdebate.errors import DataError


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of ``range(n)`` used in ``epoch`` (a pure function of its arguments)."""
    return np.random.default_rng([seed, epoch]).permutation(n)


class ItemStream:
    """Endless shuffled batches; each batch is full (an epoch's tail continues into the next epoch)."""

    def __init__(self, items: Sequence[Item], batch_size: int, seed: int) -> None:
        if not items:
            raise DataError("ItemStream needs at least one item")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise DataError(f"ItemStream batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise DataError(f"ItemStream seed must be a non-negative integer, got {seed!r}")
        self._items = tuple(items)
        self.batch_size = batch_size
        self.seed = int(seed)
        self._epoch = 0
        self._position = 0
        self._order = epoch_order(len(self._items), self.seed, 0)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def epoch(self) -> int:
        return self._epoch

    def next_batch(self) -> list[Item]:
        batch = []
        while len(batch) < self.batch_size:
            if self._position == len(self._items):
                self._epoch += 1
                self._position = 0
                self._order = epoch_order(len(self._items), self.seed, self._epoch)
            take = min(self.batch_size - len(batch), len(self._items) - self._position)
            batch.extend(self._items[i] for i in self._order[self._position:self._position + take])
            self._position += take
        return batch

    def state(self) -> dict[str, int]:
        """Plain ints to store in a checkpoint; ``num_items`` guards against restoring on other data."""
        return {"epoch": self._epoch, "position": self._position, "seed": self.seed,
                "num_items": len(self._items)}

    def restore(self, state: Mapping[str, int]) -> None:
        try:
            epoch, position = int(state["epoch"]), int(state["position"])
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(f"ItemStream state needs integer 'epoch' and 'position', got {dict(state)!r}") from e
        if "num_items" in state and int(state["num_items"]) != len(self._items):
            raise DataError(
                f"ItemStream state was saved for {int(state['num_items'])} items but this stream has "
                f"{len(self._items)}: the dataset changed since the checkpoint"
            )
        if "seed" in state and int(state["seed"]) != self.seed:
            raise DataError(f"ItemStream state was saved with seed {int(state['seed'])}, this stream uses {self.seed}")
        if epoch < 0 or not 0 <= position <= len(self._items):
            raise DataError(f"ItemStream state out of range: epoch={epoch}, position={position}, items={len(self._items)}")
        self._epoch, self._position = epoch, position
        self._order = epoch_order(len(self._items), self.seed, epoch)


def split_holdout(items: Sequence[Item], size: int, seed: int) -> tuple[list[Item], list[Item]]:
    """(train, held-out): ``size`` items chosen by ``seed``; both keep the source order."""
    if seed < 0:
        raise DataError(f"held-out split seed must be non-negative, got {seed}")
    if not 0 <= size < len(items):
        raise DataError(f"cannot hold out {size} of {len(items)} items (need 0 <= size < number of items)")
    chosen = set(np.random.default_rng([seed, 0x5EED]).permutation(len(items))[:size].tolist())
    train = [it for i, it in enumerate(items) if i not in chosen]
    held = [it for i, it in enumerate(items) if i in chosen]
    return train, held
