"""The vLLM server a local sweep keeps for its runs (``jaxdebate.sampling.vllm.shared`` says how a run
finds it and why its samples do not change)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxdebate.errors import ConfigError, SamplerError
from jaxdebate.model import load, load_tokenizer
from jaxdebate.sampling.factory import choose_backend
from jaxdebate.sampling.vllm.delivery import start_dir
from jaxdebate.sampling.vllm.server import VLLMServer
from jaxdebate.sampling.vllm.shared import SharedServer, server_digest


class SweepServer:
    """The server a local sweep keeps for its runs: started for the first run that samples on a server
    it would start itself, kept while the next runs' configs ask for the same one, replaced when a run
    asks for another, restarted when found dead between runs; stopped by :meth:`close`."""

    def __init__(self, state_dir: str | Path) -> None:
        self.state_dir = Path(state_dir)
        self._server: VLLMServer | None = None
        self._digest = ""
        self._dirs: dict[tuple, Path] = {}  # (model source, dtype) -> its start directory

    def env_for(self, config: Any) -> dict[str, str]:
        """The environment that lets the run of ``config`` (a loaded Config) sample on the shared server;
        {} when the run would not start a vLLM server of its own (JAX sampler, a ``url``, no install)."""
        if config.sampler.vllm.url or choose_backend(config.sampler, warn=False)[0] != "vllm":
            return {}
        try:
            vllm, _ = config.sampler.vllm.resolved()
            model_dir = self._start_dir(config.model.source, vllm.dtype)
            digest = server_digest(vllm, model_dir)
            if self._server is not None and (digest != self._digest or not self._server.healthy(timeout=10.0)):
                self.close()
            if self._server is None:
                print(f"[sweep] starting the vLLM server the runs share (log: {self.state_dir / 'vllm' / 'server.log'})",
                      flush=True)
                self._digest = digest
                self._server = VLLMServer(vllm, self.state_dir, model_dir).start()
        except (ConfigError, SamplerError) as e:  # the run starts its own, which reports the problem itself
            print(f"[sweep] no shared vLLM server ({e}); the run starts its own", flush=True)
            self.close()
            return {}
        return SharedServer(self._server.url, self._server.key, digest).env()

    def _start_dir(self, source: str, dtype: str) -> Path:
        """The model's start directory (:func:`delivery.start_dir`), made from its weights once per sweep."""
        if (source, dtype) not in self._dirs:
            params, model_config = load(source)
            self._dirs[source, dtype] = start_dir(params, model_config, load_tokenizer(source), dtype)
        return self._dirs[source, dtype]

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
        self._server, self._digest = None, ""

    def __enter__(self) -> SweepServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
