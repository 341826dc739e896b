"""Benchmark: forward + backward (mean next-token NLL and its gradient) of our Flax Llama vs PyTorch
transformers ``LlamaForCausalLM`` on the same SmolLM2-135M weights, ``--batch x --length`` tokens.

Each variant runs in its own subprocess, one after another (peak RSS per variant; XLA_FLAGS per variant):

    .venv/bin/python bench/forward_backward.py                      # jax/torch x fp32/bf16, ratios + MFU
    .venv/bin/python bench/forward_backward.py --variants jax-fp32 --remat dots --steps 2
    .venv/bin/python bench/forward_backward.py --variants jax-bf16 --xla-flags "--xla_cpu_use_thunk_runtime=false"

Ours: ``jax.value_and_grad`` of ``-mean(token_logprobs)`` (chunked output head, never the full logits),
params fp32, compute ``dtype``. Torch: ``model(ids, labels=ids).loss.backward()``; bf16 = fp32 params
under ``torch.autocast("cpu", bfloat16)`` (the same mixed-precision policy). MFU counts model FLOPs
(3 x forward: 2 x params per token incl. the output head, + attention 4·L·H·hd·T) against ``--peak``
GFLOP/s (default 200, the fp32 GEMM peak measured on this 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import hf_dir, rss_gb  # bench/common.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("jax-fp32", "torch-fp32", "jax-bf16", "torch-bf16")


def batch_tokens(batch: int, length: int):
    import numpy as np

    return np.random.default_rng(0).integers(10, 49000, size=(batch, length)).astype(np.int32)


def run_jax(args, dtype: str) -> dict:
    import jax
    import jax.numpy as jnp

    from jaxdebate.model import load, token_logprobs

    params, config = load(str(hf_dir()), dtype="bfloat16" if dtype == "bf16" else "float32", remat=args.remat)
    tokens = jnp.asarray(batch_tokens(args.batch, args.length))
    mask = jnp.ones(tokens.shape, bool)

    def loss_fn(p):
        lp = token_logprobs(p, config, tokens, mask, chunk_size=args.chunk)
        return -lp[:, 1:].mean()

    step = jax.jit(jax.value_and_grad(loss_fn))
    start = time.perf_counter()
    compiled = step.lower(params).compile()
    compile_s = time.perf_counter() - start
    memory = compiled.memory_analysis()
    times, cpu_times, loss = [], [], None
    for _ in range(args.steps + 1):
        start, cpu = time.perf_counter(), time.process_time()
        loss, grads = compiled(params)
        jax.block_until_ready(grads)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
        del grads
    return {"loss": float(loss), "times": times[1:], "cpu_times": cpu_times[1:], "first_s": times[0],
            "compile_s": compile_s,
            "temp_gb": memory.temp_size_in_bytes / 1e9, "flops_per_token": config.flops_per_token(args.length)}


def run_torch(args, dtype: str) -> dict:
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(hf_dir(), dtype=torch.float32)
    model.train()
    ids = torch.tensor(batch_tokens(args.batch, args.length), dtype=torch.long)
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bf16" else contextlib.nullcontext
    times, cpu_times, loss = [], [], None
    for _ in range(args.steps + 1):
        start, cpu = time.perf_counter(), time.process_time()
        with ctx():
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
    return {"loss": float(loss), "times": times[1:], "cpu_times": cpu_times[1:], "first_s": times[0],
            "threads": torch.get_num_threads()}


def child(args) -> None:
    side, dtype = args.child.split("-")
    result = run_jax(args, dtype) if side == "jax" else run_torch(args, dtype)
    result["rss_gb"] = rss_gb()
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--remat", default="none", choices=("none", "dots", "full"))
    parser.add_argument("--chunk", type=int, default=1024, help="token_logprobs chunk (tokens)")
    parser.add_argument("--xla-flags", default="", help="extra XLA_FLAGS for the jax variants")
    parser.add_argument("--peak", type=float, default=200.0, help="GFLOP/s that MFU is measured against")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    # On a GPU this parent only exports the weights, but JAX would hold 75% of the GPU's memory for the
    # parent's whole life (the variants then ran out of memory); the children inherit the setting.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    hf_dir()
    results = {}
    tokens = args.batch * args.length
    for variant in args.variants:
        cmd = [sys.executable, __file__, "--child", variant, "--batch", str(args.batch), "--length",
               str(args.length), "--steps", str(args.steps), "--remat", args.remat, "--chunk", str(args.chunk)]
        env = dict(os.environ)
        if variant.startswith("jax") and args.xla_flags:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + args.xla_flags).strip()
        load = os.getloadavg()[0]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode or line is None:
            print(f"{variant}: FAILED\n{proc.stderr[-3000:]}", file=sys.stderr)
            continue
        r = json.loads(line[len("RESULT "):])
        r["load_before"] = load
        results[variant] = r
        best = min(r["times"])
        extra = ""
        if "flops_per_token" in r:
            gflops = 3 * r["flops_per_token"] * tokens / best / 1e9
            r["gflops"] = gflops
            extra = (f"  {gflops:6.1f} GFLOP/s  MFU {100 * gflops / args.peak:5.1f}%  compile {r['compile_s']:.1f}s"
                     f"  temp {r['temp_gb']:.2f} GB")
        print(f"{variant:11s} loss {r['loss']:.4f}  step {best:6.2f}s (runs {', '.join(f'{t:.2f}' for t in r['times'])};"
              f" CPU {min(r['cpu_times']):.2f}s)"
              f"  {tokens / best:8.1f} tok/s  RSS {r['rss_gb']:.1f} GB  load {load:.1f}{extra}", flush=True)
    for dtype in ("fp32", "bf16"):
        ours, theirs = results.get(f"jax-{dtype}"), results.get(f"torch-{dtype}")
        if ours and theirs:
            ratio = min(theirs["times"]) / min(ours["times"])
            cpu_ratio = min(theirs["cpu_times"]) / min(ours["cpu_times"])
            print(f"ratio ours/torch {dtype}: {ratio:.2f}x wall, {cpu_ratio:.2f}x per CPU-second"
                  f"  (loss {ours['loss']:.4f} vs {theirs['loss']:.4f})")
        if ours and "flops_per_token" in ours:
            fwd = 3 * ours["flops_per_token"] * tokens / 1e12
            print(f"model FLOPs per step ({dtype}): {fwd:.2f} TFLOP")


if __name__ == "__main__":
    main()
