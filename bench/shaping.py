"""Groups/s of jaxdebate.shaping.shape_rewards vs the plain Python/NumPy loop reference, per strategy.

    .venv/bin/python bench/shaping.py [--sizes 10000 1000000] [--loop-groups 300] [--repeats 3]

Shapes: G=4 rollouts, A=3 agents, R=2 rounds, early-stopped debates with padding (realistic masks).
JAX: best of --repeats timed calls after one warm-up (compile) call, result blocked on.
Loop reference (tests/shaping/shaping_reference.py): timed on the first --loop-groups groups of the same
batch and reported per group; its groups/s is extrapolated to every B (it is linear in B).
Two ratios: wall clock (groups/s), and CPU time per group (process time, all threads), which is
less sensitive to other jobs sharing the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "shaping"))

import jax  # noqa: E402

import shaping_reference as ref  # noqa: E402
from jaxdebate.shaping import ShapingConfig, shape_rewards  # noqa: E402

G, A, R = 4, 3, 2
CONFIGS = [
    ("identity", {}),
    ("difference_rewards", {}),
    ("potential_based", {"gamma": 0.99, "potential_type": "debate_length"}),
    ("potential_based", {"gamma": 0.99, "potential_type": "agreement"}),
    ("coma_advantage", {"n_rollouts_per_prompt": G}),
    ("reward_mixing", {"alpha": 0.5}),
]


def label(name, params):
    return f"{name}({params['potential_type']})" if "potential_type" in params else name


def time_jax(name, params, batch, repeats):
    """(best wall seconds, best CPU seconds) of one call on the whole batch."""
    arrays = [jax.device_put(x) for x in batch]
    config = ShapingConfig(name, params)
    shape_rewards(config, *arrays).block_until_ready()  # compile
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        shape_rewards(config, *arrays).block_until_ready()
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return wall, cpu


def time_loop(name, params, batch, n):
    """(wall seconds, CPU seconds) per group of the loop reference on the first n groups."""
    sub = [x[:n] for x in batch]
    t, c = time.perf_counter(), time.process_time()
    ref.shape_batch(name, params, *sub)
    return (time.perf_counter() - t) / n, (time.process_time() - c) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--loop-groups", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; G={G} A={A} R={R}")
    rng = np.random.default_rng(0)
    batches = {b: ref.random_batch(rng, b, G, A, R, mask="padding") for b in args.sizes}
    loop_s = {label(*c): time_loop(*c, batches[args.sizes[0]], args.loop_groups) for c in CONFIGS}
    print(f"loop reference: timed on {args.loop_groups} groups, extrapolated per group\n")
    print(f"{'strategy':<32}{'B':>9}{'jax groups/s':>14}{'loop groups/s':>15}{'ratio':>8}"
          f"{'jax cpu ns/grp':>16}{'loop cpu us/grp':>17}{'cpu ratio':>11}")
    worst, worst_cpu = float("inf"), float("inf")
    for b in args.sizes:
        for name, params in CONFIGS:
            wall, cpu = time_jax(name, params, batches[b], args.repeats)
            loop_wall, loop_cpu = loop_s[label(name, params)]
            ratio, cpu_ratio = loop_wall / (wall / b), loop_cpu / (cpu / b)
            worst, worst_cpu = min(worst, ratio), min(worst_cpu, cpu_ratio)
            print(f"{label(name, params):<32}{b:>9}{b / wall:>14,.0f}{1 / loop_wall:>15,.0f}{ratio:>7,.0f}x"
                  f"{1e9 * cpu / b:>16,.0f}{1e6 * loop_cpu:>17,.1f}{cpu_ratio:>10,.0f}x")
    print(f"\nworst ratio: wall {worst:,.0f}x, CPU time {worst_cpu:,.0f}x (target >= 1000x)")


if __name__ == "__main__":
    main()
