"""Greedy completions answered once: a Sampler wrapper that remembers every greedy request's result.

A greedy completion is a function of the prompt, the token budget, the stop strings and the weights,
so within one weight version the same greedy request need not be decoded twice. A step's validation
asks for many: the single-agent set and round 1 of the greedy debate send the same prompts (the
debate's first round is the single-agent prompt), and the transfer set may repeat them. Sampled
(``temperature > 0``) requests always go to the wrapped sampler: their draws depend on the seed.

Use one memo per validation (``with memoize_greedy(sampler) as s: ...``): it holds completions in
memory until closed, and forgets them when the wrapped sampler's weight version changes.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

from jaxdebate.sampling.base import Completion, Sampler, SamplingParams, StreamingSampler, per_prompt_params


def _key(prompt: Sequence[int], params: SamplingParams) -> tuple | None:
    """What a greedy request's completions depend on besides the weights (None: not greedy)."""
    if params.temperature > 0:
        return None
    return tuple(int(t) for t in prompt), params.max_tokens, params.stop, params.n


class GreedyMemo:
    """A Sampler that answers a greedy request it has seen before from memory (see the module)."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self._known: dict[tuple, list[Completion]] = {}
        self._version = sampler.weight_version
        self.hits = 0  # completions answered from memory
        self.misses = 0  # greedy completions decoded and remembered

    @property
    def weight_version(self) -> int:
        return self.sampler.weight_version

    def _current(self) -> dict[tuple, list[Completion]]:
        if self.sampler.weight_version != self._version:  # new weights: nothing remembered holds
            self._known.clear()
            self._version = self.sampler.weight_version
        return self._known

    def generate(self, prompts: Sequence[Sequence[int]],
                 params: SamplingParams | Sequence[SamplingParams]) -> list[list[Completion]]:
        per_prompt = per_prompt_params(prompts, params)
        known = self._current()
        keys = [_key(p, sp) for p, sp in zip(prompts, per_prompt)]
        # each distinct unknown request once, in order (a repeat inside this call is a hit too)
        todo: dict[Any, int] = {}
        for k, key in enumerate(keys):
            if key is None or (key not in known and key not in todo):
                todo[key if key is not None else ("sampled", k)] = k
        asked = list(todo.values())
        answers = self.sampler.generate([prompts[k] for k in asked], [per_prompt[k] for k in asked]) if asked else []
        results: list[list[Completion] | None] = [None] * len(prompts)
        for k, answer in zip(asked, answers):
            results[k] = list(answer)
            if keys[k] is not None:
                known[keys[k]] = list(answer)
                self.misses += per_prompt[k].n
        for k, key in enumerate(keys):
            if results[k] is None:
                results[k] = list(known[key])
                self.hits += per_prompt[k].n
        return results  # type: ignore[return-value]

    def update_weights(self, params: Any, version: int) -> None:
        self.sampler.update_weights(params, version)

    def stats(self) -> dict[str, float]:
        return self.sampler.stats()

    def close(self) -> None:
        """Forget every remembered completion (the wrapped sampler stays open: it is not ours)."""
        self._known.clear()

    def __enter__(self) -> GreedyMemo:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StreamingGreedyMemo(GreedyMemo):
    """:class:`GreedyMemo` over a :class:`StreamingSampler`, streaming too: a remembered request's
    future is already done; a repeat of a request still in flight waits for it (on a future of its own)."""

    def __init__(self, sampler: StreamingSampler) -> None:
        super().__init__(sampler)
        self._pending: dict[tuple, concurrent.futures.Future] = {}

    def submit(self, prompt: Sequence[int], params: SamplingParams) -> concurrent.futures.Future:
        key = _key(prompt, params)
        if key is None:
            return self.sampler.submit(prompt, params)
        known = self._current()
        if key in known or key in self._pending:
            self.hits += params.n
            copy: concurrent.futures.Future = concurrent.futures.Future()  # its own future: callers key on it
            if key in known:
                copy.set_result(list(known[key]))
            else:
                self._pending[key].add_done_callback(lambda f: _copy_outcome(f, copy))
            return copy
        self.misses += params.n
        future = self.sampler.submit(prompt, params)
        self._pending[key] = future
        version = self._version

        def remember(f: concurrent.futures.Future) -> None:
            self._pending.pop(key, None)
            if not f.cancelled() and f.exception() is None and version == self._version:
                self._known[key] = list(f.result())

        future.add_done_callback(remember)
        return future

    def close(self) -> None:
        super().close()
        self._pending.clear()


def _copy_outcome(source: concurrent.futures.Future, target: concurrent.futures.Future) -> None:
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(list(source.result()))


def memoize_greedy(sampler: Sampler) -> GreedyMemo:
    """``sampler`` behind a greedy memo that keeps its streaming interface when it has one."""
    return StreamingGreedyMemo(sampler) if isinstance(sampler, StreamingSampler) else GreedyMemo(sampler)
