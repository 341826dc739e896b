"""Play debates from the shell and print readable transcripts.

    python -m jaxdebate.debate --data math500 --n 3 [--model smollm2] [--agents 3 --rounds 2] ...

Uses the in-process JAX sampler. Prints every rollout's turns (answers, answer classes, correctness),
each round's votes and plurality, the debate's answer and verdict, then accuracies and counters.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from jaxdebate.errors import JaxDebateError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m jaxdebate.debate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="math500", help="dataset name or .jsonl path (default: math500)")
    p.add_argument("--n", type=int, default=3, help="number of items (default: 3)")
    p.add_argument("--offset", type=int, default=0, help="skip this many items first")
    p.add_argument("--shuffle", action="store_true", help="pick the items at random (by --seed)")
    p.add_argument("--model", default="smollm2", help="model source string (default: smollm2)")
    p.add_argument("--agents", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rollouts", type=int, default=1, help="debates per item (G)")
    p.add_argument("--env", default=None, help="play every item in this environment (default: remap math -> math_debate)")
    p.add_argument("--early-stop", action="store_true", help="stop a debate when all agents agree")
    p.add_argument("--protocol", default="boxed",
                   help="answer protocol (jaxdebate.debate.answer_protocols: boxed, answer_line; default: boxed)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--max-sequence-length", type=int, default=2048)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--grading-timeout", type=float, default=5.0, help="hard limit per equivalence check (s)")
    p.add_argument("--full", action="store_true", help="print whole completions (default: last 1200 chars)")
    p.add_argument("--json", action="store_true", help="also print the group arrays as JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return _run(args)
    except JaxDebateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import numpy as np

    from jaxdebate.data import load_items
    from jaxdebate.debate import DebateConfig, Grader, run_debates
    from jaxdebate.errors import ConfigError
    from jaxdebate.sampling.base import SamplingParams

    if args.n < 1 or args.offset < 0:
        raise ConfigError("--n must be >= 1 and --offset >= 0")
    from jaxdebate.debate.answer_protocols import with_protocol

    config = with_protocol(DebateConfig(num_agents=args.agents, num_rounds=args.rounds,
                                        early_stop_on_consensus=args.early_stop,
                                        max_sequence_length=args.max_sequence_length), args.protocol)
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens)
    items = load_items(args.data, env=args.env)
    if args.shuffle:
        order = np.random.default_rng(args.seed).permutation(len(items))
        items = [items[i] for i in order]
    items = items[args.offset:args.offset + args.n]
    if not items:
        raise ConfigError(f"--offset {args.offset} is past the end of {args.data!r}")
    remap = None if args.env else {"math": "math_debate"}

    from jaxdebate.model import load, load_tokenizer
    from jaxdebate.sampling import JaxSampler

    start = time.perf_counter()
    tokenizer = load_tokenizer(args.model)
    params, model_config = load(args.model)
    sampler = JaxSampler(params, model_config, tokenizer)
    print(f"[jaxdebate] loaded {args.model} in {time.perf_counter() - start:.1f}s; playing {len(items)} item(s) "
          f"x {args.rollouts} rollout(s), {args.agents} agents x {args.rounds} rounds", file=sys.stderr)
    try:
        with Grader(timeout_s=args.grading_timeout) as grader:
            start = time.perf_counter()
            batch = run_debates(sampler, tokenizer, items, config=config, n_rollouts=args.rollouts,
                                sampling=sampling, grader=grader, env_name_remap=remap, seed=args.seed)
            elapsed = time.perf_counter() - start
    finally:
        sampler.close()
    for text in batch.transcripts(max_chars=None if args.full else 1200):
        print(text, end="\n\n")
    print("=== summary")
    for key, value in batch.summary().items():
        print(f"{key:<32} {value:.3f}")
    for key, value in batch.stats.items():
        print(f"{key:<32} {value:.2f}" if isinstance(value, float) else f"{key:<32} {value}")
    print(f"{'wall_seconds':<32} {elapsed:.1f}")
    if args.json:
        print(json.dumps({name: getattr(batch, name).tolist() for name in ("correct", "votes", "gold", "active")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
