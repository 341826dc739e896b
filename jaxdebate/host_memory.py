"""How a training process asks glibc for memory: large buffers backed by transparent huge pages.

XLA:CPU allocates its large buffers (gradients, optimiser moments, activations saved for the backward
pass) afresh on every step, glibc serves each from a new ``mmap``, and the kernel then faults in every
4 KiB page again: millions of page faults per step of a 135M model. ``glibc.malloc.hugetlb=1`` makes
glibc advise huge pages for those mappings, so the same memory arrives in 2 MiB pieces (figures:
bench/README "train_step"). glibc reads its tunables only at process start, so the launcher re-executes
itself once with them set (:func:`reexec_with_tuned_malloc`); ``JAXDEBATE_HUGEPAGES=0`` turns this off.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

TUNABLE = "glibc.malloc.hugetlb=1"
SWITCH = "JAXDEBATE_HUGEPAGES"
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def tuned_environ(environ: Mapping[str, str]) -> dict[str, str] | None:
    """``environ`` with :data:`TUNABLE` added to ``GLIBC_TUNABLES``, or ``None`` when nothing is to be
    changed (already set, switched off with ``JAXDEBATE_HUGEPAGES=0``, or not a glibc Linux)."""
    if environ.get(SWITCH, "1") == "0" or sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return None
    current = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb=" in current:
        return None
    return {**environ, "GLIBC_TUNABLES": f"{current}:{TUNABLE}" if current else TUNABLE}


def reexec_with_tuned_malloc() -> None:
    """Replace this process by the same command with :func:`tuned_environ` (same pid, arguments and
    standard streams); returns only when nothing is to be changed. Call it before any work is done."""
    env = tuned_environ(os.environ)
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def describe(environ: Mapping[str, str] = os.environ) -> str:
    """One line for the run's log: the malloc tunables this process started with and the kernel's
    transparent huge page mode (huge pages need ``madvise`` or ``always``)."""
    try:
        mode = THP_SETTING.read_text().split("[", 1)[1].split("]", 1)[0]
    except (OSError, IndexError):
        mode = "unknown"
    tunables = environ.get("GLIBC_TUNABLES") or "none"
    return f"GLIBC_TUNABLES={tunables} (transparent huge pages: {mode})"
