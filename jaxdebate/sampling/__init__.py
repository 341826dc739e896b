"""Samplers (DESIGN §6): one interface (:mod:`jaxdebate.sampling.base`), an in-process JAX backend and
a vLLM server backend (``jaxdebate.sampling.vllm.client``, imported on demand)."""

from jaxdebate.sampling.base import Completion, Sampler, SamplingParams, StreamingSampler, per_prompt_params

__all__ = ["Completion", "JaxSampler", "Sampler", "SamplingParams", "StreamingSampler", "per_prompt_params"]


def __getattr__(name: str):
    # JaxSampler imports jax: load it on first use, so that config modules (sampling.vllm.config,
    # imported by jaxdebate.config) stay free of jax.
    if name == "JaxSampler":
        from jaxdebate.sampling.jax_sampler import JaxSampler

        return JaxSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
