"""The Sampler backed by a vLLM server, with live weight sync from the JAX learner (DESIGN §6).

``generate`` sends every prompt of a call as its own concurrent ``/v1/completions`` request (token-id
prompts, ``n`` samples each). ``update_weights`` casts the parameter tree into one sync file
(:mod:`jaxdebate.sampling.vllm.weight_file`; under ``/dev/shm`` when present, or uploaded to a server on
another host, :mod:`jaxdebate.sampling.vllm.delivery`) and the server loads it in place:
``/pause?mode=wait`` (in-flight sequences finish on the old weights) -> ``load_weights_files`` (the
worker extension; it also refreshes the tied LM head's packed copy) -> reset the prefix cache ->
``/resume``. Completions are tagged with the version they were sampled with; calls and syncs exclude
each other, so no completion mixes weights. A dead or silent server is restarted from its HF directory
plus the last sync file, and the lost requests are sent again (``sampler.vllm.max_restarts`` per call).

Log-probs follow the convention of :mod:`jaxdebate.sampling.base` with ``logprobs_mode =
processed_logprobs`` (the default) whenever ``top_p == 1``; with ``top_p < 1`` vLLM reports the
log-prob under the top-p-renormalised distribution (higher by ``-log(kept mass)``).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
import math
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from jaxdebate.errors import ConfigError, SamplerError
from jaxdebate.model.hf_format import weight_files
from jaxdebate.processes import wait_until
from jaxdebate.sampling.base import Completion, SamplingParams, per_prompt_params
from jaxdebate.sampling.hardware import check_cpu_head_dim, is_cpu_build
from jaxdebate.sampling.vllm.rwlock import ReadWriteLock
from jaxdebate.sampling.vllm.config import VLLMConfig
from jaxdebate.sampling.vllm.server import SERVED_MODEL_NAME, ServerUnavailable, VLLMServer
from jaxdebate.sampling.vllm.shared import attach
from jaxdebate.sampling.vllm.delivery import PathDelivery, PushDelivery, SyncFiles, WeightDelivery
from jaxdebate.sampling.vllm.delivery import new_sync_dir as _new_sync_dir
from jaxdebate.sampling.vllm.delivery import start_dir

log = logging.getLogger(__name__)

@dataclasses.dataclass(frozen=True)
class SyncStats:
    """Latency of one weight sync: exporting the tree (the sync file), uploading it (push syncs only)
    and the server's in-place load (pause, load, prefix-cache reset, resume)."""

    version: int
    export_s: float
    reload_s: float
    restarted: bool = False
    upload_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.export_s + self.upload_s + self.reload_s


class VLLMSampler:
    """Sampler protocol over a vLLM server. Build it with :meth:`from_params` or :meth:`from_dir`."""

    def __init__(
        self,
        server: VLLMServer,
        *,
        model_dir: str | Path | None,
        sync_dir: str | Path | None,
        model_config: Any = None,
        stop_token_ids: Sequence[int] = (),
        weight_version: int = 0,
        own_config: VLLMConfig | None = None,
    ) -> None:
        """``own_config``: ``server`` is a sweep's shared server (:mod:`.shared`), and this is the config
        of the server to start on ``model_dir`` should it be lost."""
        self.server = server
        self.config: VLLMConfig = server.config
        self._own_config = own_config
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self._sync_dir = Path(sync_dir) if sync_dir is not None else None
        self._delivery: WeightDelivery = PushDelivery() if sync_dir is None else PathDelivery(self._sync_dir)
        self._synced: SyncFiles | None = None  # the last sync's files, loaded on top of model_dir
        self._model_config = model_config
        self._stop_ids = [int(t) for t in stop_token_ids]
        self._version = int(weight_version)
        self._lock = ReadWriteLock()
        self._restart_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.config.max_concurrency, thread_name_prefix="vllm-request"
        )
        self.syncs: list[SyncStats] = []
        self.restarts = 0
        self._closed = False
        self._max_model_len = 0
        self._refresh_model_info()
        atexit.register(self.close)

    # ------------------------------------------------------------------------------- construction

    @classmethod
    def from_params(
        cls,
        params: Any,
        model_config: Any,
        *,
        workdir: str | Path,
        config: VLLMConfig | None = None,
        tokenizer: Any = None,
        stop_token_ids: Sequence[int] | None = None,
        weight_version: int = 0,
    ) -> VLLMSampler:
        """Serve ``params`` (in ``config.dtype``) from a new server, loaded as its first sync, or from
        the server at ``config.url``. ``tokenizer`` is a jaxdebate Tokenizer; its
        ``stop_ids`` end completions unless ``stop_token_ids`` is given."""
        config, _ = (config or VLLMConfig()).resolved()  # dtype "auto": the machine's choice
        if tokenizer is None:
            raise ConfigError("VLLMSampler.from_params needs the model's tokenizer (the server tokenises stop strings)")
        stops = tokenizer.stop_ids if stop_token_ids is None else stop_token_ids
        if config.url:  # a running server: nothing to start from, the first sync loads the weights
            sampler = cls._connect(config, workdir, None, model_config, stops, weight_version)
            with _closed_on_error(sampler):
                sampler.update_weights(params, weight_version)
            return sampler
        if is_cpu_build(config.python_path()):  # fail now, not at the first request of every restart
            check_cpu_head_dim(model_config.head_dim)
        # The server starts on one directory per model, the same path for every run (vLLM caches its
        # compiled kernels by it), and gets ``params`` as its first sync; a restart does the same.
        model_dir = start_dir(params, model_config, tokenizer, config.dtype)
        shared = attach(config, model_dir)
        server = VLLMServer(config, workdir, model_dir)
        if shared is not None:  # the sweep's server: the one this run would start, already running
            on_shared = VLLMServer(dataclasses.replace(config, url=shared.url), workdir, model_dir, api_key=shared.key)
            if on_shared.healthy(timeout=10.0):
                print(f"[jaxdebate] sampling on the sweep's vLLM server at {shared.url}, started as this run would "
                      "start its own (sampler/shared_server)", file=sys.stderr)
                server = on_shared
            else:
                print(f"[jaxdebate] the sweep's vLLM server at {shared.url} does not answer: starting this run's own",
                      file=sys.stderr)
                shared = None
        return cls._started(server, _new_sync_dir(config, workdir), model_dir, model_config, stops, weight_version,
                            then=lambda sampler: sampler.update_weights(params, weight_version),
                            own_config=config if shared is not None else None)

    @classmethod
    def from_dir(
        cls,
        model_dir: str | Path,
        *,
        workdir: str | Path,
        config: VLLMConfig | None = None,
        model_config: Any = None,
        stop_token_ids: Sequence[int] = (),
        weight_version: int = 0,
    ) -> VLLMSampler:
        """Serve an existing HF directory (with tokenizer files), or load its weights into the server
        at ``config.url``. ``model_config`` (a jaxdebate LlamaConfig) is needed only to push parameter
        trees later with :meth:`update_weights`."""
        config, _ = (config or VLLMConfig()).resolved()  # dtype "auto": the machine's choice
        if config.url:
            sampler = cls._connect(config, workdir, model_dir, model_config, stop_token_ids, weight_version)
            with _closed_on_error(sampler):
                sampler.update_weights(model_dir, weight_version)
            return sampler
        return cls._started(VLLMServer(config, workdir, model_dir), _new_sync_dir(config, workdir), model_dir,
                            model_config, stop_token_ids, weight_version)

    @classmethod
    def _connect(cls, config: VLLMConfig, workdir: str | Path, model_dir: str | Path | None, model_config: Any,
                 stop_token_ids: Sequence[int], weight_version: int) -> VLLMSampler:
        """A sampler on the running server at ``config.url``; syncs by ``config.sync_mode()``."""
        push = config.sync_mode() == "push"
        sync_dir = None if push else _new_sync_dir(config, workdir)
        return cls._started(VLLMServer(config, workdir), sync_dir, model_dir, model_config, stop_token_ids,
                            weight_version)

    @classmethod
    def _started(cls, server: VLLMServer, sync_dir: Path | None, model_dir: str | Path | None, model_config: Any,
                 stop_token_ids: Sequence[int], weight_version: int, then=None,
                 own_config: VLLMConfig | None = None) -> VLLMSampler:
        """Start ``server`` (or check the external one) and wrap it, then run ``then(sampler)``; on any
        failure the server is stopped (a no-op for an external one) and ``sync_dir`` removed."""
        try:
            server.start()
            sampler = cls(server, model_dir=model_dir, sync_dir=sync_dir, model_config=model_config,
                          stop_token_ids=stop_token_ids, weight_version=weight_version, own_config=own_config)
            if then is not None:
                then(sampler)
            return sampler
        except BaseException:
            server.stop()
            if sync_dir is not None:
                shutil.rmtree(sync_dir, ignore_errors=True)
            raise

    # ------------------------------------------------------------------------------------ protocol

    @property
    def weight_version(self) -> int:
        return self._version

    @property
    def model_dir(self) -> Path | None:
        """The HF directory (with tokenizer) the server starts from; a restart then loads the last
        sync's files on top (a directory given to ``update_weights`` must outlive the sampler).
        None for a running server at ``url`` that was given a parameter tree."""
        return self._model_dir

    @property
    def last_sync(self) -> SyncStats | None:
        return self.syncs[-1] if self.syncs else None

    def stats(self) -> dict[str, float]:
        """Server restarts so far, whether the server is a sweep's shared one, and the last weight sync's
        version and latency."""
        out = {"sampler/restarts": float(self.restarts), "sampler/shared_server": float(self._own_config is not None)}
        sync = self.last_sync
        if sync is not None:
            out.update({"sync/version": float(sync.version), "sync/export_s": sync.export_s,
                        "sync/upload_s": sync.upload_s, "sync/reload_s": sync.reload_s})
        return out

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams],
    ) -> list[list[Completion]]:
        """Sample ``n`` completions per prompt; all prompts go out as concurrent requests."""
        self._check_open()
        per_prompt = per_prompt_params(prompts, params)
        if not prompts:
            return []
        with self._lock.read():
            version = self._version
            bodies = [self._body(i, p, sp) for i, (p, sp) in enumerate(zip(prompts, per_prompt))]
            futures = [self._pool.submit(self._complete, i, body, sp, version)
                       for i, (body, sp) in enumerate(zip(bodies, per_prompt))]
            return [f.result() for f in futures]

    def submit(self, prompt: Sequence[int], params: SamplingParams) -> concurrent.futures.Future:
        """One prompt as its own request (seeded like a one-prompt :meth:`generate`); the future holds
        its ``n`` completions. A weight sync waits for submitted requests, as for ``generate``."""
        self._check_open()
        body = self._body(0, prompt, params)

        def run() -> list[Completion]:
            with self._lock.read():
                return self._complete(0, body, params, self._version)

        return self._pool.submit(run)

    def _complete(self, index: int, body: dict[str, Any], sp: SamplingParams, version: int) -> list[Completion]:
        """Send one completion request; after a lost request (server dead or silent) restart or wait
        for the server and resend, at most ``max_restarts`` times."""
        return self._retrying(lambda: self._parse(index, self.server.request("/v1/completions", body), sp, version),
                              "a vLLM request")

    def update_weights(self, params: Any, version: int) -> None:
        """Serve ``params`` (a parameter tree, or an HF directory) from now on, as ``version``.

        Waits for running calls to finish; the server pauses (in-flight sequences drain on the old
        weights), loads the new ones in place, refreshes the tied head and clears the prefix cache."""
        self._check_open()
        with self._lock.write():
            t0 = time.perf_counter()
            if isinstance(params, (str, Path)):
                directory = Path(params)
                if not (directory / "config.json").is_file():
                    raise ConfigError(f"update_weights: {directory} is not an HF model directory")
                files = SyncFiles(paths=tuple(weight_files(directory)))
            else:
                files = self._export(params)
            t1 = time.perf_counter()
            self._synced = files  # what a restart loads on top of model_dir (a path sync file is overwritten)
            starts = self.server.starts

            def load() -> float:  # a server restarted since has loaded ``files`` itself (``_restart``)
                return self._load(files) if self.server.starts == starts else 0.0

            upload_s = self._retrying(load, f"weight sync to version {version}")
            restarted = self.server.starts != starts
            self._version = int(version)
            stats = SyncStats(int(version), t1 - t0, time.perf_counter() - t1 - upload_s, restarted, upload_s)
            self.syncs.append(stats)
            log.info("vLLM weight sync to version %d: export %.3f s, upload %.3f s, reload %.3f s%s", version,
                     stats.export_s, stats.upload_s, stats.reload_s, " (server restarted)" if restarted else "")

    def close(self) -> None:
        """Stop the server (if started here) and delete the exported weights."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.server.stop()
        self._delivery.close()
        if self._sync_dir is not None:
            shutil.rmtree(self._sync_dir, ignore_errors=True)

    def __enter__(self) -> VLLMSampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ requests

    def _body(self, index: int, prompt: Sequence[int], sp: SamplingParams) -> dict[str, Any]:
        ids = [int(t) for t in prompt]
        if not ids:
            raise SamplerError(f"prompt {index} is empty")
        max_tokens = sp.max_tokens
        if self._max_model_len:
            room = self._max_model_len - len(ids)
            if room < 1:
                raise SamplerError(
                    f"prompt {index} has {len(ids)} tokens, no room left in the server's context of "
                    f"{self._max_model_len} (sampler.vllm.max_model_len)"
                )
            max_tokens = min(max_tokens, room)
        greedy = sp.temperature == 0.0
        body: dict[str, Any] = {
            "model": self._served_name,
            "prompt": ids,
            "max_tokens": max_tokens,
            # vLLM refuses greedy requests with n > 1 (400 "n must be 1 when using greedy sampling");
            # greedy samples are identical anyway, so one is asked for and _parse repeats it n times
            "n": 1 if greedy else sp.n,
            "temperature": sp.temperature,
            "top_p": 1.0 if greedy else sp.top_p,
            "top_k": 0,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": True,
            "include_stop_str_in_output": False,
        }
        if sp.seed is not None:
            body["seed"] = request_seed(sp.seed, index)
        if sp.stop:
            body["stop"] = list(sp.stop)
        if self._stop_ids:
            body["stop_token_ids"] = list(self._stop_ids)
        return body

    def _parse(self, index: int, payload: Any, sp: SamplingParams, version: int) -> list[Completion]:
        try:
            choices = sorted(payload["choices"], key=lambda c: c.get("index", 0))
        except (KeyError, TypeError) as e:
            raise SamplerError(f"vLLM answer for prompt {index} has no choices: {str(payload)[:300]}") from e
        asked = 1 if sp.temperature == 0.0 else sp.n
        if len(choices) != asked:
            raise SamplerError(f"vLLM returned {len(choices)} completions for prompt {index}, expected n={asked}")
        out = []
        for choice in choices:
            finish = choice.get("finish_reason")
            if finish == "abort":
                raise ServerUnavailable(f"vLLM aborted the request for prompt {index}")
            if finish not in ("stop", "length"):
                raise SamplerError(f"vLLM finished prompt {index} with unexpected reason {finish!r}")
            lp = choice.get("logprobs") or {}
            logprobs = [(-math.inf if x is None else float(x)) for x in lp.get("token_logprobs") or []]
            ids = choice.get("token_ids")
            if ids is None:  # older servers: ids only as "token_id:N" strings
                ids = [int(str(t).rsplit(":", 1)[1]) for t in lp.get("tokens") or []]
            if len(ids) != len(logprobs):
                raise SamplerError(
                    f"vLLM returned {len(ids)} tokens but {len(logprobs)} log-probs for prompt {index}"
                )
            out.append(Completion(tuple(int(t) for t in ids), choice.get("text") or "", tuple(logprobs),
                                  finish, version))
        return out * (sp.n // asked)  # greedy: the one completion for each of the n samples

    # ---------------------------------------------------------------------------------- weight sync

    def _export(self, params: Any) -> SyncFiles:
        if self._model_config is None:
            raise ConfigError("update_weights got a parameter tree but the sampler has no model_config "
                              "(pass model_config= to VLLMSampler.from_dir)")
        return self._delivery.export(params, self._model_config, self.config.dtype)

    def _load(self, files: SyncFiles) -> float:
        """Deliver ``files`` (returns the time: an upload for push syncs, ~0 for paths), then pause
        (drain), load them in place (the worker extension also refreshes the LM head), reset the prefix
        cache and resume."""
        server = self.server
        t0 = time.perf_counter()
        paths = self._delivery.deliver(server, files)
        upload_s = time.perf_counter() - t0
        server.request("/pause", query={"mode": "wait"})
        try:
            result = server.collective_rpc("load_weights_files", {"paths": paths})
            log.debug("vLLM workers loaded %s: %s", paths, result)
            if not wait_until(lambda: (server.request("/reset_prefix_cache") or {}).get("success", True), 1.0, 0.05):
                raise SamplerError("vLLM refused to reset its prefix cache after a weight sync")
        finally:
            with contextlib.suppress(ServerUnavailable):
                server.request("/resume")
        return upload_s

    # ------------------------------------------------------------------------------------- recovery

    def _retrying(self, call, what: str):
        """``call()``; after a lost server (dead or silent) restart it, or wait for an external one, and
        call again, at most ``max_restarts`` times."""
        attempt, last_cause = 0, None
        while True:
            epoch = self.server.starts
            try:
                return call()
            except ServerUnavailable as e:
                self._check_open()  # closed while a request was in flight (a trainer stopping): no restart
                cause = None if self.server.external else self.server.root_cause()
                if cause is not None and cause == last_cause:  # a restart did not help: it will not
                    raise SamplerError(f"{what} failed: the vLLM server fails the same way after a restart: "
                                       f"{cause} (log: {self.server.log_path})") from e
                if attempt == self.config.max_restarts:
                    raise SamplerError(
                        f"{what} failed after {attempt} restart(s) (sampler.vllm.max_restarts): {e}"
                        + (f"\ncause: {cause}" if cause else "")
                        + f"\nlast lines of {self.server.log_path}:\n{self.server.log_tail()}"
                    ) from e
                attempt, last_cause = attempt + 1, cause
                self._recover(e, epoch)

    def _recover(self, error: Exception, epoch: int) -> None:
        """After lost requests: restart a dead or silent server (once per failure), or wait."""
        if self.server.external and self._own_config is None:
            self._wait_external(error)
            return
        with self._restart_lock:
            if self.server.starts != epoch:  # another call restarted it already
                return
            if self.server.running() and self.server.healthy(timeout=10.0):
                log.warning("vLLM requests failed but the server is healthy; retrying: %s", error)
                return
            self._restart(reason=str(error))

    def _restart(self, reason: str) -> None:
        """Start the server again from ``model_dir``, then load the last synced tree on top."""
        log.warning("restarting the vLLM server from %s%s (weights version %d): %s", self._model_dir,
                    " + the last sync file" if self._synced else "", self._version, reason)
        self.restarts += 1
        if self._own_config is not None:  # the sweep's shared server is lost: go on with one of our own
            self.server = VLLMServer(self._own_config, self.server.state_dir.parent, self._model_dir)
            self.config, self._own_config = self.server.config, None
            self.server.start()
        else:
            self.server.restart(self._model_dir)
        if self._synced is not None:
            self._load(self._synced)
        self._refresh_model_info()

    def _wait_external(self, error: Exception) -> None:
        if not wait_until(lambda: self.server.healthy(timeout=5.0), self.config.startup_timeout_s, 1.0):
            raise SamplerError(f"the vLLM server at {self.server.url} stopped answering: {error}") from error

    def _refresh_model_info(self) -> None:
        info = self.server.model_info()
        self._served_name = str(info.get("id", SERVED_MODEL_NAME))
        self._max_model_len = int(info.get("max_model_len") or 0)

    def _check_open(self) -> None:
        if self._closed:
            raise SamplerError("the vLLM sampler is closed")


def request_seed(seed: int, index: int) -> int:
    """The vLLM seed of prompt ``index`` in a call seeded with ``seed``.

    vLLM draws its noise from the request seed alone, so one seed shared by every prompt of a call
    would give all prompts the same noise (correlated samples); mixing in the index keeps calls
    repeatable and prompts independent. (The ``n`` samples of one prompt already differ.)
    """
    digest = hashlib.sha256(f"jaxdebate:{int(seed)}:{int(index)}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@contextlib.contextmanager
def _closed_on_error(sampler: VLLMSampler) -> Iterator[None]:
    """Close ``sampler`` (its sync dir with it) when the block raises."""
    try:
        yield
    except BaseException:
        sampler.close()
        raise
