"""Helpers every benchmark shares: the peak RSS and the model exported once as an HF directory (the
form torch, TRL and vLLM load) under ``$JAXDEBATE_CACHE/bench-<model>-hf``."""

from __future__ import annotations

import re
import resource
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
