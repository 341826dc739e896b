"""The evaluation noise floor of a trained run (results/arithmetic-v2/PROTOCOL.md, pilot): its last
checkpoint validated twice, each time with a fresh sampler, exactly as the trainer validates
(held-out single + 3x2 debate, greedy); prints how many items' answers differ between the two.

    .venv/bin/python scripts/eval_noise_floor.py runs/arithmetic-v2-pilot/b2/identity-seed101 --out noise.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jaxdebate.checkpoint import load_policy  # noqa: E402
from jaxdebate.debate import Grader  # noqa: E402
from jaxdebate.rl import validation_plan  # noqa: E402
from jaxdebate.sampling.factory import make_sampler  # noqa: E402
from jaxdebate.sampling.hardware import simd_flags  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    params, llama, tokenizer, config = load_policy(args.workdir)
    _, val_items = config.data.load()
    rows, seconds = [], []
    with Grader() as grader, tempfile.TemporaryDirectory() as tmp:
        for repeat in range(2):
            start = time.perf_counter()
            with make_sampler(config.sampler, params, llama, tokenizer, workdir=tmp,
                              max_total_len=config.debate.max_sequence_length, seed=config.training.seed) as sampler:
                _, found = validation_plan.run_offline(config, sampler, tokenizer, grader, val_items,
                                                       Path(tmp) / str(repeat))
            seconds.append(time.perf_counter() - start)
            rows.append(found)
    first, second = ({(r["mode"], r["id"]): r for r in rs} for rs in rows)
    differ = {mode: sum(first[k]["answers"] != second[k]["answers"] for k in first if k[0] == mode)
              for mode in sorted({k[0] for k in first})}
    out = {"workdir": args.workdir, "items": {m: sum(k[0] == m for k in first) for m in differ},
           "items_whose_answers_differ": differ,
           "accuracy": {m: [sum(r[(m, k[1])]["correct_final"] for k in first if k[0] == m) / sum(k[0] == m for k in first)
                            for r in (first, second)] for m in differ},
           "seconds": seconds, "cpu_flags": simd_flags()}
    print(json.dumps(out, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
