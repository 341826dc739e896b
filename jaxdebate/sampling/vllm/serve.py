"""Run the sampling server for a trainer elsewhere (the cluster setup of ``sampler.vllm.url``).

    VLLM_API_KEY=<secret> python -m jaxdebate.sampling.vllm.serve --model <HF dir> --workdir <dir> \\
        [--host 0.0.0.0] [--port 8000] [--dtype auto] [-- <extra vLLM arguments>]

It starts vLLM exactly as a trainer would (worker extension, key guard, weight-upload route), with
``VLLM_API_KEY`` as its bearer key, and runs until SIGINT/SIGTERM. The trainer sets
``sampler.vllm.url=http://<this host>:<port>`` and the same ``VLLM_API_KEY``; its weight syncs are
pushed over HTTP (``sampler.vllm.sync=auto``/``push``) or read from a ``sampler.vllm.sync_dir`` both
hosts mount. The model directory must hold the trainer's architecture and tokenizer (weights are
replaced by the first sync). HTTP is not encrypted: keep the port inside the cluster's network.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time

from jaxdebate.errors import ConfigError, SamplerError
from jaxdebate.sampling.vllm.config import VLLMConfig
from jaxdebate.sampling.vllm.server import VLLMServer

_MIN_KEY = 16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m jaxdebate.sampling.vllm.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="HF model directory to start from")
    parser.add_argument("--workdir", required=True, help="the server's log, caches and temp files go here")
    parser.add_argument("--host", default="0.0.0.0", help="interface to listen on (default: all)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--python", default=VLLMConfig.python, help="the vLLM virtualenv's interpreter")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32", "float16"])
    parser.add_argument("--kv-cache-gib", type=int, default=VLLMConfig.kv_cache_gib)
    parser.add_argument("--max-model-len", type=int, default=0)
    parser.add_argument("--max-num-seqs", type=int, default=0)
    parser.add_argument("--block-size", type=int, default=0,
                        help="KV-cache block in tokens (0: 32 on the CPU build, vLLM's default on a GPU)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=VLLMConfig.gpu_memory_utilization)
    parser.add_argument("--startup-timeout-s", type=float, default=VLLMConfig.startup_timeout_s)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("extra", nargs="*", help="after --: arguments passed to vLLM verbatim")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    key = os.environ.get("VLLM_API_KEY", "")
    if len(key) < _MIN_KEY:
        print(f"jaxdebate.sampling.vllm.serve: set VLLM_API_KEY to a secret of at least {_MIN_KEY} characters (the trainer "
              f"sends the same key)", file=sys.stderr)
        return 2
    try:
        config = VLLMConfig(python=args.python, dtype=args.dtype, kv_cache_gib=args.kv_cache_gib,
                            max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                            block_size=args.block_size, gpu_memory_utilization=args.gpu_memory_utilization,
                            startup_timeout_s=args.startup_timeout_s, seed=args.seed, extra_args=tuple(args.extra))
        server = VLLMServer(config, args.workdir, args.model, host=args.host, port=args.port, api_key=key)
    except ConfigError as e:
        print(f"jaxdebate.sampling.vllm.serve: {e}", file=sys.stderr)
        return 2
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(True))
    try:
        server.start()
    except (ConfigError, SamplerError) as e:
        print(f"jaxdebate.sampling.vllm.serve: {e}", file=sys.stderr)
        return 1
    port = server.url.rsplit(":", 1)[1]
    print(f"jaxdebate: vLLM serving {args.model} on http://{socket.getfqdn()}:{port} (local {server.url}, "
          f"pid {server.pid}, log {server.log_path})", flush=True)
    try:
        while not stop:
            if not server.running():
                print(f"jaxdebate.sampling.vllm.serve: the server exited; last lines of {server.log_path}:\n{server.log_tail()}",
                      file=sys.stderr)
                return 1
            time.sleep(0.5)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
