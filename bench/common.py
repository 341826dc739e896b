"""Helpers every benchmark shares: the peak RSS and the model exported once as an HF directory (the
form torch, TRL and vLLM load) under ``$JAXDEBATE_CACHE/bench-<model>-hf``."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from pathlib import Path


def rss_gb() -> float:
    """This process's peak resident set so far, in GB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def hf_dir(model: str = "smollm2") -> Path:
    """``model`` (any source our loader takes) as an HF directory with the SmolLM2 tokenizer, exported
    by our loader the first time and reused by every bench after it."""
    from jaxdebate.model import export_hf, load, load_tokenizer
    from jaxdebate.model.sources import cache_dir

    out = cache_dir() / f"bench-{re.sub(r'[^A-Za-z0-9.-]+', '_', model)}-hf"
    if not (out / "config.json").is_file():
        params, config = load(model)
        export_hf(params, config, out, tokenizer=load_tokenizer("smollm2"))
    return out


def child_result(cmd: list[str], *, cwd: Path, env: dict, label: str) -> dict | None:
    """Run one variant's child process; the JSON of its last ``RESULT `` line, or None (its stderr's tail
    printed under ``label``) when it failed."""
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or not lines:
        print(f"{label} failed:\n{out.stderr[-3000:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1][len("RESULT "):])
