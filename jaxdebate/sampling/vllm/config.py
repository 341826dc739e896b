"""Configuration of the vLLM sampling server (the ``sampler.vllm`` config section).

Standard library only: importing this module must not pull in jax, torch or vllm, so experiment
configs can name it on machines without the server's virtualenv.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import urllib.parse
from pathlib import Path
from typing import ClassVar, Literal

from jaxdebate.configlib import Section

#: ``processed_logprobs`` is ``log_softmax(logits / temperature)`` (before top-p when top_p == 1),
#: the Sampler convention; ``raw_logprobs`` is ``log_softmax(logits)`` (temperature ignored).
LogprobsMode = Literal["processed_logprobs", "raw_logprobs"]
Dtype = Literal["auto", "bfloat16", "float32", "float16"]
#: How weight syncs reach the server: ``path`` (the server reads files the trainer writes under
#: ``sync_dir``), ``push`` (the trainer uploads them over HTTP), ``auto`` (push when ``url`` names
#: another host and no ``sync_dir`` is given, else path).
SyncMode = Literal["auto", "path", "push"]
#: The KV-cache block (tokens) of a CPU server when ``block_size`` is 0. vLLM's prefix cache reuses whole
#: blocks only, and its CPU default of 128 tokens misses most of what debate prompts share: a round's
#: prompts repeat the question and the earlier turns in heads of a few dozen tokens. The CPU attention
#: kernels take multiples of 32 (bench/README "family_run" has the measured effect).
CPU_BLOCK_SIZE = 32


@dataclasses.dataclass(frozen=True)
class VLLMConfig(Section):
    """How jaxdebate runs (or reaches) the vLLM server that samples debates.

    ``url`` empty: jaxdebate starts its own server with ``python`` (the interpreter of the server's
    virtualenv, made by ``scripts/install_vllm.sh``; a relative path is taken from the current
    directory, then from the repository root). ``url`` set: connect to that running server instead,
    started with ``python -m jaxdebate.sampling.vllm.serve`` (it is not restarted on failure;
    ``VLLM_API_KEY`` in the environment is sent as its bearer key). A server jaxdebate starts answers
    only requests with its key (all endpoints but ``/health``; see
    :mod:`jaxdebate.sampling.vllm.in_server.guard`); its sync and socket dirs are 0700.

    Weight syncs (``sync``): ``path`` writes them under ``sync_dir`` and the server reads that path;
    ``push`` uploads them to the server (``PUT /jaxdebate/weights``), which stores them where its
    workers read them; ``auto`` pushes when ``url`` names another host and ``sync_dir`` is empty.
    The cluster setup with a server on another host: either ``sync_dir`` on a filesystem both hosts
    mount at the same absolute path (path syncs), or no ``sync_dir`` (push syncs).

    ``dtype`` is both the served precision and the export precision of weight syncs; ``auto`` picks
    bfloat16 on a GPU or a CPU with AVX-512 bf16/AMX, else float32
    (:func:`jaxdebate.sampling.hardware.vllm_dtype`). ``kv_cache_gib`` sets
    ``VLLM_CPU_KVCACHE_SPACE`` (CPU) or is ignored on GPU. ``max_model_len``/``max_num_seqs`` 0 keep
    vLLM's defaults. ``block_size`` is the KV-cache block in tokens, the unit its prefix cache reuses:
    0 takes :data:`CPU_BLOCK_SIZE` on the CPU build (a multiple of 32 there) and vLLM's default on a GPU.
    ``sync_dir`` empty: ``/dev/shm`` when present, else the run's workdir; set, an
    absolute path (``~`` allowed).
    ``max_restarts`` bounds restarts of a dead server within one call; ``max_concurrency`` bounds
    concurrent HTTP requests. ``extra_args`` go to vLLM verbatim.
    """

    _name: ClassVar[str] = "sampler.vllm"
    url: str = ""
    python: str = ".venv-vllm/bin/python"
    dtype: Dtype = "auto"
    enforce_eager: bool = True
    kv_cache_gib: int = 2
    max_model_len: int = 0
    max_num_seqs: int = 0
    block_size: int = 0
    gpu_memory_utilization: float = 0.5
    startup_timeout_s: float = 600.0
    request_timeout_s: float = 600.0
    logprobs_mode: LogprobsMode = "processed_logprobs"
    sync_dir: str = ""
    sync: SyncMode = "auto"
    max_restarts: int = 2
    max_concurrency: int = 64
    seed: int = 0
    extra_args: tuple[str, ...] = ()

    def validate(self) -> None:
        if self.url and not self.url.startswith(("http://", "https://")):
            self._fail("url", "must start with http:// or https:// (or be empty to start a server)")
        if not self.url and not self.python.strip():
            self._fail("python", "must name the vLLM virtualenv's interpreter")
        self._positive("kv_cache_gib", "startup_timeout_s", "request_timeout_s", "max_concurrency")
        self._at_least(0, "max_model_len", "max_num_seqs", "block_size", "max_restarts")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            self._fail("gpu_memory_utilization", "must be in (0, 1]")
        if self.sync_dir and not Path(os.path.expanduser(self.sync_dir)).is_absolute():
            self._fail("sync_dir", "must be an absolute path (the server resolves it, from its own cwd)")
        if self.sync == "push" and not self.url:
            self._fail("sync", "'push' needs sampler.vllm.url: a server jaxdebate starts reads the sync dir")
        reserved = {"--model", "--port", "--host", "--dtype", "--logprobs-mode", "--worker-extension-cls",
                    "--block-size"}
        clash = sorted(a.split("=")[0] for a in self.extra_args if a.split("=")[0] in reserved)
        if clash:
            self._fail("extra_args", f"must not set {clash} (jaxdebate sets them)")

    def python_path(self) -> Path:
        """The server interpreter: absolute, or relative to the cwd, then to the repository root."""
        path = Path(os.path.expanduser(self.python))
        if path.is_absolute():
            return path
        for base in (Path.cwd(), repo_root()):
            if (base / path).exists():
                return (base / path).absolute()
        return (repo_root() / path).absolute()

    def resolved(self) -> tuple[VLLMConfig, str]:
        """This config with ``dtype='auto'`` replaced by the machine's choice, and the reason; for a CPU
        server it starts, ``block_size`` 0 replaced by :data:`CPU_BLOCK_SIZE`."""
        from jaxdebate.sampling.hardware import is_cpu_build, vllm_dtype

        external = bool(self.url)
        cpu = not external and is_cpu_build(self.python_path())
        dtype, why = vllm_dtype(self.dtype, external=external, cpu_build=cpu)
        block_size = self.block_size
        if cpu:
            block_size = block_size or CPU_BLOCK_SIZE
            if block_size % 32:
                self._fail("block_size", f"is {block_size}: vLLM's CPU attention needs a multiple of 32")
        return dataclasses.replace(self, dtype=dtype, block_size=block_size), why

    def installed(self) -> bool:
        """True when this config can reach a server: a URL, or an existing server interpreter."""
        return bool(self.url) or self.python_path().is_file()

    def sync_mode(self) -> Literal["path", "push"]:
        """``sync`` with ``auto`` decided: push to a server on another host unless ``sync_dir`` is set."""
        if self.sync != "auto":
            return self.sync
        return "push" if self.url and not self.sync_dir and not is_local_url(self.url) else "path"

    def sync_root(self, workdir: str | Path) -> Path:
        """Where weight syncs are written: ``sync_dir``, else ``/dev/shm``, else ``workdir``."""
        if self.sync_dir:
            return Path(os.path.expanduser(self.sync_dir))
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            return shm
        return Path(workdir)


def is_local_url(url: str) -> bool:
    """True when ``url`` names this machine: a loopback address, ``localhost`` or this host's name."""
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if host in ("localhost", "::1") or host.startswith("127."):
        return True
    if host == socket.gethostname().lower():
        return True
    return host == socket.getfqdn().lower()  # may ask DNS: only when the short name did not match


def repo_root() -> Path:
    """The checkout that holds the ``jaxdebate`` package (where ``.venv-vllm`` is made)."""
    return Path(__file__).resolve().parents[3]
