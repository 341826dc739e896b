"""The experiment config's ``sampler`` section: backend, sampling distribution, completion budget."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from jaxdebate.configlib import Section
from jaxdebate.sampling.base import SamplingParams
from jaxdebate.sampling.factory import BACKENDS
from jaxdebate.sampling.vllm.config import VLLMConfig


@dataclasses.dataclass(frozen=True)
class JaxSamplerConfig(Section):
    """The in-process JAX sampler (the ``sampler.jax`` section). ``dtype`` is its compute dtype:
    ``model`` follows ``model.dtype``; ``bfloat16`` samples from a bf16 copy of the weights with
    float32 accumulation and float32 logits (about twice the GEMM rate on CPUs with AVX-512 bf16 and on
    GPUs; slower elsewhere), so the sampler's log-probs differ slightly from an fp32 learner's.
    ``max_batch`` bounds the rows (prompts x samples) decoded together."""

    _name: ClassVar[str] = "sampler.jax"
    dtype: Literal["model", "float32", "bfloat16"] = "model"
    max_batch: int = 64

    def validate(self) -> None:
        self._at_least(1, "max_batch")


@dataclasses.dataclass(frozen=True)
class SamplerConfig(Section):
    """How debates are sampled: the backend (in-process ``jax``, a ``vllm`` server, or ``auto``: vLLM
    where it is the faster path, see :func:`jaxdebate.sampling.factory.choose_backend`), the training
    sampling distribution (``temperature``, ``top_p``; the learner's log-probs use the same
    temperature), the completion budget per turn, and the validation temperature (0 = greedy).
    ``jax`` configures the in-process sampler and ``vllm`` the server when ``backend='vllm'`` (see
    :mod:`jaxdebate.sampling.vllm.config`);
    ``fallback`` says what happens when that server cannot be reached (no ``vllm.url``, no server
    virtualenv): ``jax`` samples in-process with a warning, ``error`` stops before any compute."""

    _name: ClassVar[str] = "sampler"
    backend: str = "auto"  # "auto" or a name in sampling.factory.BACKENDS
    fallback: Literal["jax", "error"] = "jax"
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    eval_temperature: float = 0.0
    jax: JaxSamplerConfig = dataclasses.field(default_factory=JaxSamplerConfig)
    vllm: VLLMConfig = dataclasses.field(default_factory=VLLMConfig)

    def validate(self) -> None:
        if self.backend != "auto" and self.backend not in BACKENDS:
            self._fail("backend", f"must be auto or one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if not self.temperature > 0:
            self._fail("temperature", "must be > 0 for training (the policy gradient needs samples)")
        if not 0 < self.top_p <= 1:
            self._fail("top_p", "must be in (0, 1]")
        self._at_least(1, "max_new_tokens")
        if not self.eval_temperature >= 0:
            self._fail("eval_temperature", "must be >= 0 (0 = greedy)")

    def sampling_params(self, *, evaluation: bool = False) -> SamplingParams:
        """The decoding of a training step, or with ``evaluation`` of a validation (``eval_temperature``,
        no nucleus cut): one definition for the trainer, the benches and the noise-floor script."""
        if evaluation:
            return SamplingParams(temperature=self.eval_temperature, top_p=1.0, max_tokens=self.max_new_tokens)
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_new_tokens)
