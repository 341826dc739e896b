"""How a weight sync's files reach the vLLM server (``sampler.vllm.sync``): written under the sync
dir and read there by the server (``path``: its own host, or a filesystem both hosts mount), or
uploaded to the server's ``/jaxdebate/weights`` route (``push``: a server on another host).

A sync is exported once (:meth:`export`: the tree cast into the sync file) and delivered on each
attempt (:meth:`deliver`: nothing to do for a path, an upload for a push, again after a server
restart); the worker extension then loads the returned server-side paths.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any, Protocol

from jaxdebate.processes import pid_alive
from jaxdebate.sampling.vllm.config import VLLMConfig
from jaxdebate.sampling.vllm.server import VLLMServer
from jaxdebate.sampling.vllm.weight_file import FILE_NAME, SyncFile, SyncWriter


@dataclasses.dataclass(frozen=True)
class SyncFiles:
    """What one sync sends: safetensors files on disk (``paths``), or one file in memory (``data``)."""

    paths: tuple[Path, ...] = ()
    data: bytearray | None = None


class WeightDelivery(Protocol):
    def export(self, params: Any, config: Any, dtype: str) -> SyncFiles: ...

    def deliver(self, server: VLLMServer, files: SyncFiles) -> list[str]: ...

    def close(self) -> None: ...


class PathDelivery:
    """Sync files written under ``sync_dir`` (in place, see :class:`SyncWriter`); the server reads
    the same absolute path."""

    def __init__(self, sync_dir: Path) -> None:
        self._dir = Path(sync_dir) / "sync"  # not beside an HF export: vLLM would load it at start-up
        self._writer = SyncWriter(self._dir / FILE_NAME)

    def export(self, params: Any, config: Any, dtype: str) -> SyncFiles:
        self._dir.mkdir(mode=0o700, exist_ok=True)
        return SyncFiles(paths=(self._writer.write(SyncFile(params, config, dtype)),))

    def deliver(self, server: VLLMServer, files: SyncFiles) -> list[str]:
        return [str(p) for p in files.paths]

    def close(self) -> None:
        self._writer.close()


class PushDelivery:
    """Sync files uploaded to the server over HTTP; the tree's file is built in memory (one buffer,
    reused while the model's size stays the same)."""

    def __init__(self) -> None:
        self._buffer: bytearray | None = None

    def export(self, params: Any, config: Any, dtype: str) -> SyncFiles:
        sync = SyncFile(params, config, dtype)
        if self._buffer is None or len(self._buffer) != sync.size:
            self._buffer = bytearray(sync.size)
        with memoryview(self._buffer) as view:
            sync.fill(view)
        return SyncFiles(data=self._buffer)

    def deliver(self, server: VLLMServer, files: SyncFiles) -> list[str]:
        remote = []
        if files.data is not None:
            remote.append(server.upload(FILE_NAME, files.data, len(files.data)))
        for i, path in enumerate(files.paths):
            with open(path, "rb") as f:
                remote.append(server.upload(f"shard-{i:05d}-{path.name}", f, path.stat().st_size))
        return remote

    def close(self) -> None:
        self._buffer = None


def new_sync_dir(config: VLLMConfig, workdir: str | Path) -> Path:
    """A fresh 0700 ``<sync root>/jaxdebate-vllm-<pid>-<id>.<host>``; first removes the ones left by
    processes of this host that died without cleaning up (a killed trainer must not leak weights in
    /dev/shm). The host part keeps trainers on other hosts sharing ``sync_dir`` out of it."""
    root = config.sync_root(workdir)
    root.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    for stale in root.glob("jaxdebate-vllm-*-*"):
        rest, _, owner = stale.name.partition(".")
        pid = rest.split("-")[2]
        if (not owner or owner == host) and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    path = root / f"jaxdebate-vllm-{os.getpid()}-{uuid.uuid4().hex[:12]}.{host}"
    path.mkdir(mode=0o700, exist_ok=False)  # the weights the server reloads: private to this user
    path.chmod(0o700)  # whatever the umask
    return path


def start_dir(params: Any, model_config: Any, tokenizer: Any, dtype: str) -> Path:
    """Where a server jaxdebate starts from a parameter tree is started: the model's config and tokenizer,
    with the weights of the run that first made the directory, at ``$JAXDEBATE_CACHE/vllm/models/<digest
    of config and tokenizer>``. The run's own weights are loaded as the first sync right after the start,
    so the weights lying there need only the model's shapes. The path is the same for every run of one
    model, and vLLM keys its cache of compiled kernels (``sampler.vllm.enforce_eager=false``) by the model
    path: a directory per run made every run compile them again (bench/README "family_run")."""
    import hashlib
    import tempfile

    from jaxdebate.model.hf_format import export_hf, export_hf_config
    from jaxdebate.model.sources import cache_dir

    root = cache_dir() / "vllm" / "models"
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)  # weights: private to this user, as the sync dirs are
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".new-"))
    try:
        export_hf_config(model_config, tmp, tokenizer=tokenizer, dtype=dtype)
        digest = hashlib.sha256()
        for path in sorted(tmp.iterdir()):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        final = root / digest.hexdigest()[:24]
        if not (final / "model.safetensors").is_file():
            export_hf(params, model_config, tmp, tokenizer=tokenizer, dtype=dtype)
            shutil.rmtree(final, ignore_errors=True)  # one without weights is incomplete: replaced
            try:
                tmp.rename(final)  # atomic; a concurrent start that got there first made an equal directory
            except OSError:
                if not (final / "model.safetensors").is_file():
                    raise
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
