"""The Sampler interface (DESIGN §6): every backend takes token-id prompts and returns completions
with token ids, text, per-token log-probs, a finish reason and the weight version that produced them.

Log-prob convention (shared by every backend and by the learner's importance ratios): for
``temperature > 0`` a token's log-prob is ``log_softmax(logits / temperature)`` at the chosen token,
before top-p truncation; for ``temperature == 0`` (greedy) it is ``log_softmax(logits)``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from jaxdebate.errors import ConfigError

FinishReason = Literal["stop", "length"]


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample one prompt. ``n`` completions are drawn per prompt; ``seed`` makes them repeatable."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise ConfigError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ConfigError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if self.n < 1:
            raise ConfigError(f"SamplingParams.n must be >= 1, got {self.n}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        if any(not s for s in self.stop):
            raise ConfigError("SamplingParams.stop must not contain empty strings")


@dataclasses.dataclass(frozen=True)
class Completion:
    """One sampled continuation of a prompt.

    ``token_ids`` are the generated tokens only (not the prompt), including the end-of-sequence token
    when the model emitted one, and, for a stop string, up to the token that completed it.
    ``text`` is their decoding with the EOS token and the stop string (and anything after it) removed.
    ``logprobs[i]`` is the log-prob of ``token_ids[i]`` under the convention in the module docstring.
    """

    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    weight_version: int = 0

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Completion has {len(self.token_ids)} tokens but {len(self.logprobs)} log-probs"
            )

    @property
    def truncated(self) -> bool:
        """True when the completion hit ``max_tokens`` (or the context limit) instead of stopping."""
        return self.finish_reason == "length"


@runtime_checkable
class Sampler(Protocol):
    """A source of completions for token-id prompts, whose policy weights the learner can replace."""

    @property
    def weight_version(self) -> int:
        """Version of the weights currently served (the learner step that exported them)."""
        ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams],
    ) -> list[list[Completion]]:
        """Sample ``params.n`` completions for every prompt, as one batched request.

        ``params`` is one SamplingParams for all prompts or one per prompt. Returns, for each prompt
        in order, its list of ``n`` completions.
        """
        ...

    def update_weights(self, params: Any, version: int) -> None:
        """Serve the given parameter tree from now on, tagging later completions with ``version``."""
        ...

    def close(self) -> None:
        """Release processes, threads and device memory held by the sampler."""
        ...

    def stats(self) -> dict[str, float]:
        """The backend's own figures for the metrics log, keyed by metric name ({} when it has none).

        A server backend reports ``sampler/restarts`` and, once weights were synced, the last sync's
        ``sync/version``, ``sync/export_s`` and ``sync/reload_s``; the JAX sampler its compiled shapes.
        """
        ...


@runtime_checkable
class StreamingSampler(Sampler, Protocol):
    """A Sampler that also takes requests one at a time and answers each as soon as it is done, so
    that a caller can keep it busy (the debate protocol starts a debate's next round as soon as that
    debate's agents have answered, instead of waiting for the slowest debate of the batch)."""

    def submit(self, prompt: Sequence[int], params: SamplingParams) -> concurrent.futures.Future:
        """Start sampling ``params.n`` completions of one prompt; the future holds their list.
        Seeded exactly like a one-prompt :meth:`generate` call."""
        ...


def sampler_metrics(stats: dict[str, float], step: int) -> dict[str, float]:
    """A step's share of :meth:`Sampler.stats`: the ``sync/*`` latencies only when that step's weights
    were the last synced (``sync/version == step``), the version itself dropped, the rest as given."""
    synced = stats.get("sync/version") == step
    return {k: float(v) for k, v in stats.items()
            if k != "sync/version" and (synced or not k.startswith("sync/"))}


def per_prompt_params(
    prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams]
) -> list[SamplingParams]:
    """Normalise ``params`` to one SamplingParams per prompt (shared helper for every backend)."""
    if isinstance(params, SamplingParams):
        return [params] * len(prompts)
    params = list(params)
    if len(params) != len(prompts):
        raise ValueError(f"got {len(params)} SamplingParams for {len(prompts)} prompts")
    return params
