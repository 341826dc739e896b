"""Facts about this machine that decide fast paths: the CPU's instruction-set flags and whether bf16
arithmetic is native here. Standard library only (configs and the vLLM server's virtualenv read it)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

#: CPU flags with which bf16 dot products run natively (without them bf16 is emulated).
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


def bf16_flags(flags: Iterable[str] | None = None) -> list[str]:
    """The fast-bf16 flags present (``flags`` defaults to this machine's)."""
    have = cpu_flags() if flags is None else frozenset(flags)
    return [f for f in BF16_FLAGS if f in have]


def fast_bf16(platform: str, flags: Iterable[str] | None = None) -> tuple[bool, str]:
    """Whether bf16 matmuls (f32 accumulation) beat f32 on ``platform`` (``jax.default_backend()``),
    and why: always on accelerators; on a CPU only with AVX-512 bf16 or AMX (``flags`` defaults to
    this machine's)."""
    if platform != "cpu":
        return True, f"the {platform} has native bf16 matmuls"
    found = bf16_flags(flags)
    if found:
        return True, f"the CPU has {'/'.join(found)}"
    return False, "the CPU has no AVX-512 bf16 or AMX, so bf16 would be emulated"
