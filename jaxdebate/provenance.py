"""What a recorded result says about the code and the machine that made it: the git commit (and
whether tracked files outside ``results/`` differed from it), the CPU's AVX-512/AMX flags and the
host. Every sweep run (``run.json``) and every coherence stage (``stages/<stage>.json``) records it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from jaxdebate.sampling.hardware import cpu_kind

_REPO = Path(__file__).resolve().parent.parent  # the checkout whose commit is recorded


def provenance(repo: Path = _REPO) -> dict[str, Any]:
    """``commit``, ``dirty``, ``cpu_flags`` (``sampling.hardware.cpu_kind``) and ``host``. ``dirty`` leaves
    ``results/`` out: drivers write their reports there between runs, before they are committed, and
    that is output, not the code a run ran."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")),
            "cpu_flags": cpu_kind(), "host": os.uname().nodename}
