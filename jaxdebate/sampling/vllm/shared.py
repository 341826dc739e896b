"""One vLLM server kept alive across the runs of a local sweep, instead of one started per run.

A run that would start its own CPU server spends ~30 s of a ~6 min configs/arithmetic run on the start
(bench/README "family_run"). The sweep starts one server (``jaxdebate.sweep_server``) and names it to each run
in the environment (``JAXDEBATE_VLLM_SHARED``: its URL, key and the digest of its command line). A run
whose config would start a server with that very command line samples on it instead
(:func:`attach`); any other run starts its own, as without a sweep. The run's config, its recorded
config and its step-0 validation key do not change: the server is the one the run would have started.
Each run loads its own weights as its first sync (which empties the prefix cache) and seeds every
request itself, so its draws do not depend on the runs before it. If the shared server dies, the run
starts its own and goes on (:meth:`VLLMSampler._recover`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from jaxdebate.sampling.hardware import is_cpu_build
from jaxdebate.sampling.vllm.config import VLLMConfig
from jaxdebate.sampling.vllm.server import server_args

log = logging.getLogger(__name__)

ENV = "JAXDEBATE_VLLM_SHARED"


@dataclasses.dataclass(frozen=True)
class SharedServer:
    """A running server a sweep shares with its runs: where it is, its key, what command started it."""

    url: str
    key: str
    digest: str

    def env(self) -> dict[str, str]:
        return {ENV: json.dumps(dataclasses.asdict(self))}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> SharedServer | None:
        text = environ.get(ENV, "")
        if not text:
            return None
        try:
            return cls(**json.loads(text))
        except (ValueError, TypeError) as e:
            log.warning("ignoring %s (not a shared-server description: %s); starting an own server", ENV, e)
            return None


def server_digest(config: VLLMConfig, model_dir: str | Path) -> str:
    """What makes two servers the same instrument: the command line a run would start (model directory,
    dtype, KV block, seed, eager or compiled, ...; the port aside), the KV cache size and the interpreter."""
    python = config.python_path()
    args = server_args(config, Path(model_dir).resolve(), 0, cpu=is_cpu_build(python))
    return hashlib.sha256(json.dumps([args, config.kv_cache_gib, str(python)]).encode()).hexdigest()[:24]


def attach(config: VLLMConfig, model_dir: str | Path, environ: Mapping[str, str] = os.environ) -> SharedServer | None:
    """The sweep's server when it is the one ``config`` (resolved) would start on ``model_dir``, else None."""
    shared = SharedServer.from_env(environ)
    if shared is None or config.url:
        return None
    if shared.digest != server_digest(config, model_dir):
        log.info("the sweep's vLLM server was started otherwise than this run's config says; starting an own one")
        return None
    return shared
