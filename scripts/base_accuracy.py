"""Base accuracy of a model on the graded arithmetic levels (README "Base accuracy"): one
``python -m jaxdebate.eval`` run per level x {greedy, T=1} x {1 agent, 3-agent 2-round debate}.

    .venv/bin/python scripts/base_accuracy.py --out results/arithmetic/base_accuracy [--model smollm2]

Writes every run's per-item JSONL and summary under ``--out`` and a markdown table ``table.md``.
Finished cells are skipped when the command is run again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

LEVEL_ITEMS = {1: 64, 2: 100, 3: 100, 4: 100, 5: 100}  # level 1 has 64 distinct problems
DEBATE_ITEMS = 30  # 50 for level 1 (and level 2 greedy): the first run's size; a debate costs 6 turns per item


def cells(single_n: dict[int, int], debate_n: int):
    for level, n in single_n.items():
        yield level, "single", "greedy", n, ["--agents", "1", "--rounds", "1"]
        yield level, "single", "T=1", n, ["--agents", "1", "--rounds", "1", "--temperature", "1", "--samples", "4"]
        m = min(n, 50 if level == 1 else debate_n)
        yield level, "debate", "greedy", m, ["--agents", "3", "--rounds", "2"]
        yield level, "debate", "T=1", m, ["--agents", "3", "--rounds", "2", "--temperature", "1",
                                                         "--samples", "2"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--protocol", default="answer_line")
    p.add_argument("--max-tokens", default="48")
    p.add_argument("--seed", type=int, default=1, help="data seed (the training family uses seed 0)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for level, shape, decoding, n, extra in cells(LEVEL_ITEMS, DEBATE_ITEMS):
        name = f"L{level}-{shape}-{decoding.replace('=', '')}"
        summary_path = out / f"{name}.summary.json"
        if not summary_path.is_file():
            cmd = [sys.executable, "-m", "jaxdebate.eval", "--model", args.model,
                   "--data", f"arithmetic:level={level},n={LEVEL_ITEMS[level]},seed={args.seed}", "--n", str(n),
                   "--protocol", args.protocol, "--max-tokens", args.max_tokens, "--max-sequence-length", "512",
                   "--out", str(out / f"{name}.jsonl"), "--no-progress", *extra]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        summary = json.loads(summary_path.read_text())
        results.append({"level": level, "shape": shape, "decoding": decoding, **{
            k: summary[k] for k in ("accuracy", "ci95", "n", "no_answer_fraction", "mean_completion_tokens", "seconds")}})
        print(json.dumps(results[-1]), flush=True)
    (out / "summary.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["| level | 1 agent, greedy | 1 agent, T=1 (x4) | 3x2 debate, greedy | 3x2 debate, T=1 (x2) |",
             "|---|---|---|---|---|"]
    for level in LEVEL_ITEMS:
        row = [f"{level}"]
        for shape, decoding in (("single", "greedy"), ("single", "T=1"), ("debate", "greedy"), ("debate", "T=1")):
            r = next(x for x in results if (x["level"], x["shape"], x["decoding"]) == (level, shape, decoding))
            row.append(f"{r['accuracy']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] (n={r['n']})")
        lines.append("| " + " | ".join(row) + " |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
