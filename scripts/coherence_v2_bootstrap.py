"""The final coherence-v2 models against the base and each other with the items resampled too.

The report's seed-level tests (`summary.json` `method_family`) are t tests over the 3 training seeds on
the same 300 evaluation items, so their intervals hold for these items only. This resamples the items
and the seeds together (a two-level bootstrap: 300 items with replacement, then 3 seeds with
replacement; the base is one model, so only its items are resampled) and prints percentile 95%
intervals of the mean accuracy differences, lenient (the protocol's) and strict (the answer line).
It reads the committed per-item rows, `results/coherence-v2/runs/<variant>-seed<k>/eval/comparison.jsonl`:

    .venv/bin/python scripts/coherence_v2_bootstrap.py                   # rpo and sft, seeds 1-3
    .venv/bin/python scripts/coherence_v2_bootstrap.py --draws 10000 --set eval_platinum
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

RUNS = Path(__file__).resolve().parent.parent / "results" / "coherence-v2" / "runs"
KEYS = {"lenient": "correct", "strict": "correct_strict"}


def correct(variant: str, seeds: list[int], eval_set: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(tuned [seeds, items], base [items])`` correctness on the same items, in the same order."""
    tuned, base, ids = [], None, None
    for seed in seeds:
        path = RUNS / f"{variant}-seed{seed}" / eval_set / "comparison.jsonl"
        if not path.is_file():
            sys.exit(f"error: {path} is missing (evaluate the run first)")
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if ids is None:
            ids, base = [r["id"] for r in rows], np.array([bool(r["base"][key]) for r in rows])
        elif [r["id"] for r in rows] != ids:
            sys.exit(f"error: {path} holds other items than seed {seeds[0]}'s")
        tuned.append([bool(r["dpo"][key]) for r in rows])
    return np.array(tuned), base


def interval(first: np.ndarray, second: np.ndarray, draws: int, rng: np.random.Generator) -> list[float]:
    """Percentile 95% interval of mean(first) - mean(second); a 2-D side is [seeds, items]. Two 2-D
    sides are paired by seed (the same seed fixes the same pair order and initialisation in both
    variants), so one draw of seeds serves both."""
    n = first.shape[-1]
    out = np.empty(draws)
    for i in range(draws):
        items = rng.integers(0, n, n)
        seeds = rng.integers(0, len(first), len(first))
        means = [(side[seeds] if side.ndim == 2 else side)[..., items].mean() for side in (first, second)]
        out[i] = means[0] - means[1]
    return np.percentile(out, [2.5, 97.5]).tolist()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs=2, default=["rpo", "sft"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--set", dest="eval_set", default="eval", help="evaluation folder (eval, eval_platinum)")
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    a, b = args.variants
    print(f"{args.eval_set}: seeds {args.seeds}, {args.draws} draws (items and seeds resampled), percentile 95%")
    for kind, key in KEYS.items():
        (ta, base), (tb, _) = (correct(v, args.seeds, args.eval_set, key) for v in (a, b))
        for name, first, second in ((f"{a} - base", ta, base), (f"{b} - base", tb, base), (f"{a} - {b}", ta, tb)):
            low, high = interval(first, second, args.draws, rng)
            print(f"  {kind:8s} {name:12s} {first.mean() - second.mean():+.3f} [{low:+.3f}, {high:+.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
