"""Benchmark: XLA:CPU options on SmolLM2's matmuls and on the whole GRPO train step (issue 13 item 3).

Each option set runs in fresh subprocesses (``XLA_FLAGS`` is read once, when jax starts), one after
another on the same machine, against the default set measured in the same run:

1. ``gemm``: GFLOP/s of one ``jnp.dot`` at SmolLM2-135M's layer shapes (2,048 token rows x 576 ->
   1,536, the MLP's up projection, and back), fp32 and bf16 inputs with fp32 accumulation
   (``preferred_element_type``, as the model's bf16 compute path runs them).
2. ``step`` (unless ``--gemm-only``): one real GRPO optimiser step on the debate workload of
   ``bench/train_step.py`` (``--variant jax-fp32-packed``), median of ``--steps`` after the first.

    .venv/bin/python bench/xla_flags.py                       # the default set vs the candidates below
    .venv/bin/python bench/xla_flags.py --gemm-only
    .venv/bin/python bench/xla_flags.py --sets default xla_cpu_use_onednn=true   # sets without the dashes

The last line is ``best XLA option set vs default, train step: X (<set>)``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = (
    "",  # XLA's defaults
    "--xla_cpu_experimental_ynn_fusion_type=",  # plain Eigen dots, no YNNPACK fusions
    "--xla_cpu_use_onednn=true",
    "--xla_cpu_experimental_onednn_fusion_type=dot",
    "--xla_cpu_experimental_xnn_fusion_type=",
    "--xla_cpu_enable_fast_math=true",
    # element-wise ops into YNNPACK subgraphs beside the single dots: the MLP backward's SiLU passes
    "--xla_cpu_experimental_ynn_fusion_type=individual_dot,eltwise",
)
SHAPES = ((2048, 576, 1536), (2048, 1536, 576))


def gemm_child(reps: int) -> dict:
    """GFLOP/s of ``x @ w`` per shape and dtype (best of ``reps`` timed calls after a compile)."""
    import jax
    import jax.numpy as jnp

    out = {}
    for dtype in ("float32", "bfloat16"):
        rates = []
        for m, k, n in SHAPES:
            kx, kw = jax.random.split(jax.random.key(0))
            x = jax.random.normal(kx, (m, k), jnp.float32).astype(dtype)
            w = jax.random.normal(kw, (k, n), jnp.float32).astype(dtype)
            dot = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
            dot(x, w).block_until_ready()
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                dot(x, w).block_until_ready()
                best = min(best, time.perf_counter() - t0)
            rates.append(2 * m * k * n / best / 1e9)
        out[dtype] = sum(rates) / len(rates)
    return out


def _flags(text: str) -> str:
    """``XLA_FLAGS`` from a set written without dashes: options split at commas, except a comma inside
    an option's value list (a piece without ``=`` continues the previous option:
    ``xla_cpu_experimental_ynn_fusion_type=individual_dot,eltwise`` is one option)."""
    if text == "default":
        return ""
    options: list[str] = []
    for piece in text.split(","):
        if "=" in piece or not options:
            options.append(piece)
        else:
            options[-1] += "," + piece
    return " ".join("--" + option for option in options)


def run_child(args: list[str], flags: str) -> dict | None:
    env = dict(os.environ, XLA_FLAGS=flags)
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or not lines:
        print(f"  [{flags or 'default'}] failed: {out.stderr.strip()[-600:]}", flush=True)
        return None
    return json.loads(lines[-1][7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", help="option sets to compare, each written without the leading "
                        "dashes ('a=1,b=2' for two options, 'a=x,y' for one with a list value; 'default' for "
                        "none); the first is the baseline; a set may repeat, to alternate")
    parser.add_argument("--gemm-only", action="store_true")
    parser.add_argument("--steps", type=int, default=2, help="timed train steps after the first (median)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--gemm-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gemm_child:
        print("RESULT " + json.dumps(gemm_child(args.reps)), flush=True)
        return

    step_args = ["bench/train_step.py", "--variant", "jax-fp32-packed", "--workload", "debate", "--prompts", "1",
                 "--steps", str(args.steps), "--remat", "none"]  # as configs/arithmetic
    sets = list(CANDIDATES) if not args.sets else [_flags(text) for text in args.sets]
    rows = []
    for flags in sets:
        gemm = run_child([__file__, "--gemm-child", "--reps", str(args.reps)], flags)
        step = None if args.gemm_only or gemm is None else run_child(step_args, flags)
        rows.append((flags, gemm, step))
        line = f"{flags or '(default)':<48}"
        if gemm:
            line += f" gemm fp32 {gemm['float32']:6.1f}  bf16 {gemm['bfloat16']:6.1f} GFLOP/s"
        if step:
            line += f"  step {step['step_s']:6.2f} s (first {step['first_step_s']:.1f} s, loss {step['loss']:.5f})"
        print(line, flush=True)
    base = rows[0]
    if base[1]:
        for flags, gemm, _ in rows[1:]:
            if gemm:
                print(f"gemm vs default [{flags}]: fp32 {gemm['float32'] / base[1]['float32']:.2f}x, "
                      f"bf16 {gemm['bfloat16'] / base[1]['bfloat16']:.2f}x")
    timed = [(flags, step) for flags, _, step in rows[1:] if step]
    if base[2] and timed:
        flags, step = min(timed, key=lambda fs: fs[1]["step_s"])
        print(f"best XLA option set vs default, train step: {base[2]['step_s'] / step['step_s']:.2f} ({flags})")


if __name__ == "__main__":
    main()
