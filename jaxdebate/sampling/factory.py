"""Build the sampler a ``sampler`` config section names: the in-process JAX sampler or a vLLM server.

``backend='auto'`` (the default) takes vLLM where it is the faster path (see :func:`choose_backend`);
``backend='vllm'`` on a machine where no server can be reached (no ``sampler.vllm.url`` and no
server virtualenv) falls back to the JAX sampler when ``sampler.fallback='jax'`` (the default, with a
warning) or fails before any compute when it is ``'error'``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from jaxdebate.errors import ConfigError
from jaxdebate.sampling.base import Sampler
from jaxdebate.sampling.hardware import bf16_flags, cpu_kind, is_cpu_build

if TYPE_CHECKING:  # the sampler section validates its backend name against BACKENDS below
    from jaxdebate.sampling.config import SamplerConfig


def choose_backend(config: SamplerConfig, *, warn: bool = True) -> tuple[str, str]:
    """The backend that will sample and why.

    ``jax``/``vllm`` are taken as given, except that an unreachable vLLM (no ``sampler.vllm.url``, no
    server virtualenv) falls back to ``jax`` when ``config.fallback == 'jax'`` (a warning) and raises
    :class:`ConfigError` when it is ``'error'``. ``auto`` picks vLLM where it is the faster path: a
    given URL, a GPU build, or a CPU with AVX-512 bf16/AMX; on CPUs without them the in-process JAX
    sampler, which is as fast as vLLM's CPU server in fp32 there and much faster than it in bf16
    (figures: README "Sampling backends", bench/README "sampler").
    """
    vllm = config.vllm
    if config.backend == "auto":
        if not vllm.installed():
            return "jax", f"auto: no vLLM server (sampler.vllm.url is empty and {vllm.python_path()} does not exist)"
        if vllm.url:
            return "vllm", "auto: sampler.vllm.url is set"
        if not is_cpu_build(vllm.python_path()):
            return "vllm", "auto: the server's vLLM is a GPU build"
        found = bf16_flags()
        if found:
            return "vllm", f"auto: vLLM's CPU server in bf16, the CPU has {'/'.join(found)}"
        return "jax", ("auto: the CPU has no AVX-512 bf16 or AMX, where vLLM's CPU server decodes slower than "
                       "the in-process JAX sampler (README: Sampling backends)")
    if config.backend != "vllm" or vllm.installed():
        return config.backend, f"sampler.backend={config.backend}"
    missing = (
        f"sampler.backend='vllm' but no vLLM server is reachable: sampler.vllm.url is empty and "
        f"{vllm.python_path()} does not exist (make it with `bash scripts/install_vllm.sh`)"
    )
    if config.fallback == "error":
        raise ConfigError(f"{missing}; sampler.fallback='error' forbids sampling in-process")
    if warn:
        print(f"warning: {missing}; sampling with the in-process JAX sampler instead "
              "(set sampler.fallback=error to fail instead)", file=sys.stderr)
    return "jax", "fallback: vLLM unreachable"


def describe(config: SamplerConfig, backend: str, reason: str) -> str:
    """One start-up line: the sampler, its precision, and why each was chosen."""
    if backend != "vllm":
        dtype = "" if config.jax.dtype == "model" else f"; computes in {config.jax.dtype} (sampler.jax.dtype)"
        return f"sampler: jax ({reason}){dtype}"
    resolved, why = config.vllm.resolved()
    return f"sampler: vllm ({reason}); served in {resolved.dtype} ({why})"


def decoder(config: SamplerConfig, model_dtype: str) -> str:
    """What a greedy answer depends on besides the weights and the prompt: the backend that will decode,
    its precision, the device and the CPU kind, e.g. ``jax float32 on cpu, CPU (AVX2 only: no AVX-512/AMX)``
    (with a server URL the CPU is this client's: the server's machine is not known here).
    Answers decoded under two different strings are not reused as each other's (the coherence
    evaluation's setting records it); ``model_dtype`` is what ``sampler.jax.dtype='model'`` means."""
    import jax

    backend, _ = choose_backend(config, warn=False)
    if backend != "vllm":
        dtype = model_dtype if config.jax.dtype == "model" else config.jax.dtype
        return f"jax {dtype} on {jax.devices()[0].device_kind}, CPU {cpu_kind()}"
    vllm = config.vllm
    device = (f"the server at {vllm.url}" if vllm.url
              else f"a local {'CPU' if is_cpu_build(vllm.python_path()) else 'GPU'} server")
    return f"vllm {vllm.resolved()[0].dtype} on {device}, CPU {cpu_kind()}"


@dataclasses.dataclass(frozen=True)
class BackendContext:
    """What every backend builder gets besides the ``sampler`` section: the weights to serve (and
    their version), the model and tokenizer, where a server may keep its files, the sequence budget,
    the devices (a mesh or None) and the run's seed."""

    params: Any
    model_config: Any
    tokenizer: Any
    workdir: Path | None = None
    max_total_len: int | None = None
    mesh: Any = None
    seed: int = 0
    version: int = 0


def _jax_backend(config: SamplerConfig, ctx: BackendContext) -> Sampler:
    from jaxdebate.sampling.jax_sampler import JaxSampler

    kwargs = {} if ctx.max_total_len is None else {"max_total_len": ctx.max_total_len}
    dtype = None if config.jax.dtype == "model" else config.jax.dtype
    return JaxSampler(ctx.params, ctx.model_config, ctx.tokenizer, mesh=ctx.mesh, seed=ctx.seed,
                      weight_version=ctx.version, dtype=dtype, max_batch=config.jax.max_batch, **kwargs)


def _vllm_backend(config: SamplerConfig, ctx: BackendContext) -> Sampler:
    from jaxdebate.sampling.vllm.client import VLLMSampler

    if ctx.workdir is None:
        raise ConfigError("the vLLM sampler needs a workdir (for its log and exported weights)")
    return VLLMSampler.from_params(ctx.params, ctx.model_config, workdir=ctx.workdir, config=config.vllm,
                                   tokenizer=ctx.tokenizer, weight_version=ctx.version)


# backend name -> builder; a new backend is its module plus one entry here (SamplerConfig, eval's
# --sampler and the docs read the names from this registry)
BACKENDS: dict[str, Callable[[SamplerConfig, BackendContext], Sampler]] = {"jax": _jax_backend, "vllm": _vllm_backend}


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
    backend, reason = choose_backend(config)
    print(f"[jaxdebate] {describe(config, backend, reason)}", file=sys.stderr)
    ctx = BackendContext(params, model_config, tokenizer, Path(workdir) if workdir is not None else None,
                         max_total_len, mesh, seed, version)
    return BACKENDS[backend](config, ctx)
