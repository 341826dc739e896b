"""Benchmark: one family validation (held-out single agent + 3x2 debate, greedy, exactly as the
trainer validates) with the JAX sampler in each compute dtype, in the same process.

    .venv/bin/python bench/validation.py                                  # base model, configs/arithmetic/identity.py
    .venv/bin/python bench/validation.py --workdir runs/arithmetic-v2-pilot/b2/identity-seed101   # a trained run
    .venv/bin/python bench/validation.py --items 50 --dtypes float32 bfloat16 --repeat 2

Prints each pass's wall time (the first pass of a dtype includes its XLA compilation; ``--repeat 2``
adds a warm pass), the held-out accuracies, how many items' answers (any agent, any round) differ from
the first dtype's, and ``validation time ratio <dtype>/<first>`` of the last passes, with the CPU flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jaxdebate.sampling.hardware import simd_flags  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/arithmetic/identity.py", help="the run config (no --workdir)")
    parser.add_argument("--workdir", default=None, help="validate this run's last checkpoint instead of the base model")
    parser.add_argument("--items", type=int, default=100, help="the first N held-out items (0: all)")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    parser.add_argument("--repeat", type=int, default=1, help="passes per dtype (the last one is compared)")
    args = parser.parse_args()

    from jaxdebate.configlib import load_config
    from jaxdebate.debate import Grader
    from jaxdebate.rl import validation_plan
    from jaxdebate.sampling.factory import make_sampler

    if args.workdir:
        from jaxdebate.checkpoint import load_policy

        params, llama, tokenizer, config = load_policy(args.workdir)
    else:
        from jaxdebate.config import Config
        from jaxdebate.model import load, load_tokenizer

        config = load_config(args.config, expected=Config)
        params, llama = load(config.model.source)
        tokenizer = load_tokenizer(config.model.source)
    _, val_items = config.data.load()
    val_items = val_items[:args.items] if args.items else val_items
    flags = simd_flags() or "(no AVX-512/AMX)"
    print(f"[bench] {len(val_items)} held-out items, {args.workdir or 'base model ' + config.model.source}; "
          f"cpu flags: {flags}", flush=True)
    seconds, answers = {}, {}
    with Grader() as grader, tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes:
            sampler_cfg = dataclasses.replace(config.sampler, jax=dataclasses.replace(config.sampler.jax, dtype=dtype))
            cfg = dataclasses.replace(config, sampler=dataclasses.replace(sampler_cfg, backend="jax"))
            with make_sampler(cfg.sampler, params, llama, tokenizer, workdir=tmp,
                              max_total_len=cfg.debate.max_sequence_length, seed=cfg.training.seed) as sampler:
                for rep in range(args.repeat):
                    start = time.perf_counter()
                    metrics, rows = validation_plan.run_offline(cfg, sampler, tokenizer, grader, val_items,
                                                                Path(tmp) / f"{dtype}-{rep}")
                    seconds[dtype] = time.perf_counter() - start
                    answers[dtype] = {(r["mode"], r["id"]): r["answers"] for r in rows}
                    acc = {k: round(v, 3) for k, v in metrics.items() if k.endswith("accuracy/debate")}
                    print(f"[bench] {dtype} pass {rep + 1}: {seconds[dtype]:.1f} s, {acc}", flush=True)
    first = args.dtypes[0]
    for dtype in args.dtypes[1:]:
        differ = sum(answers[dtype][k] != v for k, v in answers[first].items())
        print(f"[bench] {dtype} vs {first}: {differ} of {len(answers[first])} item validations have other answers")
        print(f"validation time ratio {dtype}/{first}: {seconds[dtype] / seconds[first]:.2f}  (cpu flags: {flags})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
