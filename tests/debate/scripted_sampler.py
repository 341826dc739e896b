"""A scripted Sampler (test double of ``jaxdebate.sampling.base.Sampler``) for debate protocol tests.

It answers from a script instead of a model: ``respond(b, g, a, r, prompt_text) -> text``. The turn
index is recovered from the request seed, which the protocol derives from ``(seed, b, round[, g, a])``
(see :func:`jaxdebate.debate.derive_seed`), so the script also checks that seeding contract.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from jaxdebate.debate import derive_seed
from jaxdebate.sampling.base import Completion, SamplingParams, per_prompt_params


@dataclasses.dataclass
class Call:
    prompts: list[list[int]]
    params: list[SamplingParams]


class ScriptedSampler:
    def __init__(self, tokenizer, respond: Callable[[int, int, int, int, str], str], *, seed: int,
                 shape: tuple[int, int, int, int], agents_per_item: Sequence[int] | None = None,
                 weight_version: int = 7) -> None:
        self.tokenizer = tokenizer
        self.respond = respond
        self.calls: list[Call] = []
        self._weight_version = weight_version
        B, G, A, R = shape
        agents = list(agents_per_item or [A] * B)
        self._first = {derive_seed(seed, b, 0): (b, agents[b]) for b in range(B)}
        self._later = {derive_seed(seed, b, r, g, a): (b, g, a, r)
                       for b in range(B) for g in range(G) for a in range(A) for r in range(1, R)}

    @property
    def weight_version(self) -> int:
        return self._weight_version

    def generate(self, prompts, params):
        params = per_prompt_params(prompts, params)
        self.calls.append(Call([list(p) for p in prompts], params))
        out = []
        for prompt, p in zip(prompts, params):
            text = self.tokenizer.decode(prompt, skip_special_tokens=False)
            if p.seed in self._first:
                b, agents = self._first[p.seed]
                keys = [(b, k // agents, k % agents, 0) for k in range(p.n)]
            else:
                assert p.n == 1, "later rounds have one prompt per turn"
                keys = [self._later[p.seed]]
            out.append([self._complete(self.respond(*key, text), p) for key in keys])
        return out

    def _complete(self, text: str, p: SamplingParams) -> Completion:
        ids = self.tokenizer.encode(text)
        finish = "stop"
        if len(ids) > p.max_tokens:
            ids, finish = ids[:p.max_tokens], "length"
            text = self.tokenizer.decode(ids)
        return Completion(tuple(ids), text, tuple(-0.25 for _ in ids), finish, self._weight_version)

    def update_weights(self, params, version: int) -> None:
        self._weight_version = version

    def close(self) -> None:
        pass

    def stats(self) -> dict[str, float]:
        return {"sampler/scripted_calls": float(len(self.calls))}


class StreamingScriptedSampler(ScriptedSampler):
    """The scripted sampler as a StreamingSampler: each submitted request is answered on a thread
    after ``delay(b, g, a, r)`` seconds (of its first turn); ``events`` logs ("submit"|"done", key, t)."""

    def __init__(self, *args, delay: Callable[[int, int, int, int], float], **kwargs) -> None:
        import concurrent.futures
        import threading

        super().__init__(*args, **kwargs)
        self.delay = delay
        self.events: list[tuple[str, tuple[int, int, int, int], float]] = []
        self._events_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=64)

    def _log(self, kind: str, key) -> None:
        import time

        with self._events_lock:
            self.events.append((kind, key, time.perf_counter()))

    def _key(self, p: SamplingParams):
        if p.seed in self._first:
            return (self._first[p.seed][0], 0, 0, 0)
        return self._later[p.seed]

    def submit(self, prompt, params: SamplingParams):
        import time

        key = self._key(params)
        self._log("submit", key)

        def run():
            time.sleep(self.delay(*key))
            (result,) = self.generate([prompt], [params])
            self._log("done", key)
            return result

        return self._pool.submit(run)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
