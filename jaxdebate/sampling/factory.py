"""Build the sampler a ``sampler`` config section names: the in-process JAX sampler or a vLLM server.

``backend='vllm'`` on a machine where no server can be reached (no ``sampler.vllm.url`` and no
server virtualenv) falls back to the JAX sampler when ``sampler.fallback='jax'`` (the default, with a
warning) or fails before any compute when it is ``'error'``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from jaxdebate.config import SamplerConfig
from jaxdebate.errors import ConfigError
from jaxdebate.sampling.base import Sampler


def resolve_backend(config: SamplerConfig, *, warn: bool = True) -> str:
    """The backend that will actually sample: ``config.backend``, or ``'jax'`` when vLLM is requested,
    unreachable and ``config.fallback == 'jax'``. Raises :class:`ConfigError` when it is ``'error'``."""
    if config.backend != "vllm" or config.vllm.installed():
        return config.backend
    missing = (
        f"sampler.backend='vllm' but no vLLM server is reachable: sampler.vllm.url is empty and "
        f"{config.vllm.python_path()} does not exist (make it with `bash scripts/install_vllm.sh`)"
    )
    if config.fallback == "error":
        raise ConfigError(f"{missing}; sampler.fallback='error' forbids sampling in-process")
    if warn:
        print(f"warning: {missing}; sampling with the in-process JAX sampler instead "
              "(set sampler.fallback=error to fail instead)", file=sys.stderr)
    return "jax"


def make_sampler(
    config: SamplerConfig,
    params: Any,
    model_config: Any,
    tokenizer: Any,
    *,
    workdir: str | Path | None = None,
    max_total_len: int | None = None,
    mesh: Any = None,
    seed: int = 0,
    version: int = 0,
) -> Sampler:
    """The sampler for ``config`` serving ``params`` as weight ``version``. The JAX sampler keeps
    ``params`` (pass a copy a learner will not donate); the vLLM server keeps its log, caches and
    temp files in ``workdir/vllm/``."""
    backend = resolve_backend(config)
    if backend == "jax":
        from jaxdebate.sampling.jax_sampler import JaxSampler

        kwargs = {} if max_total_len is None else {"max_total_len": max_total_len}
        return JaxSampler(params, model_config, tokenizer, mesh=mesh, seed=seed,
                          weight_version=version, **kwargs)
    if backend == "vllm":
        from jaxdebate.sampling.vllm_sampler import VLLMSampler

        if workdir is None:
            raise ConfigError("the vLLM sampler needs a workdir (for its log and exported weights)")
        return VLLMSampler.from_params(
            params, model_config, workdir=workdir, config=config.vllm,
            tokenizer=tokenizer, weight_version=version,
        )
    raise ConfigError(f"sampler.backend must be 'jax' or 'vllm', got {backend!r}")
