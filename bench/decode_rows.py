"""Benchmark: the JaxSampler with and without dropping finished rows between decode chunks.

A batch decodes until its longest completion ends; with ``shrink`` (the default) the rows that have
finished are dropped once the rest fit a row bucket half the size. Workload: the first 8 training
problems of configs/arithmetic (answer_line protocol, one agent) x 3 samples = 24 rows, SmolLM2-135M
fp32, T=1, seeded, up to 256 new tokens (completions end at EOS). Both samplers are warmed up with
one call, then timed alternately; the samples must be identical::

    .venv/bin/python bench/decode_rows.py            # --chunk 8 (the default decode_chunk)

The last line is ``decode time ratio shrink/full: X`` (median of the timed calls).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk", type=int, default=8, help="decode_chunk of both samplers")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from jaxdebate.configlib import load_config
    from jaxdebate.debate.envs import make_env
    from jaxdebate.model import load, load_tokenizer
    from jaxdebate.sampling.base import SamplingParams
    from jaxdebate.sampling.jax_sampler import JaxSampler

    config = load_config("configs/arithmetic/identity.py")
    train, _ = config.data.load()
    env = make_env("math", config.debate)
    tokenizer = load_tokenizer("smollm2")
    params, model_config = load("smollm2")
    prompts = [tokenizer.encode_chat(env.first_messages(item)) for item in train[:8]]
    sampling = [SamplingParams(temperature=1.0, max_tokens=256, seed=7, n=3) for _ in prompts]
    samplers = {shrink: JaxSampler(params, model_config, tokenizer, shrink=shrink, seed=1, decode_chunk=args.chunk)
                for shrink in (False, True)}
    for shrink, sampler in samplers.items():
        t0 = time.perf_counter()
        sampler.generate(prompts, sampling)
        print(f"shrink={shrink}: first call (compiles) {time.perf_counter() - t0:.1f} s", flush=True)
    times: dict[bool, list[float]] = {False: [], True: []}
    results = {}
    for _ in range(args.rounds):
        for shrink, sampler in samplers.items():
            before = sampler.decoded_row_steps
            t0 = time.perf_counter()
            results[shrink] = sampler.generate(prompts, sampling)
            dt = time.perf_counter() - t0
            times[shrink].append(dt)
            tokens = sum(len(c.token_ids) for cs in results[shrink] for c in cs)
            print(f"shrink={shrink}: {dt:.2f} s, {tokens} tokens, {tokens / dt:.1f} tokens/s, "
                  f"{sampler.decoded_row_steps - before} row-steps decoded, load {os.getloadavg()[0]:.2f}", flush=True)
    same = all(a.token_ids == b.token_ids for x, y in zip(results[False], results[True]) for a, b in zip(x, y))
    lengths = sorted(len(c.token_ids) for cs in results[True] for c in cs)
    print(f"identical samples: {same}; completion lengths {lengths}")
    ratio = statistics.median(times[True]) / statistics.median(times[False])
    print(f"decode time ratio shrink/full: {ratio:.2f}")


if __name__ == "__main__":
    main()
