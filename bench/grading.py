"""Completions graded per second on MATH-500 gold solutions: jaxdebate's Grader vs math-verify in-process.

    .venv/bin/python bench/grading.py [--limit 500] [--data math500]

Each completion is an item's worked gold solution (``meta["solution"]``), graded against its gold
answer ("matched": all should be correct) and against the next item's gold ("mismatched": all should
be wrong; non-equivalent pairs make sympy work harder). Rows, each timed once on a fresh grader whose
worker has already started (startup excluded; no cached results):

- ``Grader``: extract_answer + string/integer fast path + batched checks in the worker process.
- ``Grader, no fast path``: every check goes through math-verify in the worker (the safety cost).
- ``math-verify in-process`` (peer): ``verify(parse(gold), parse(solution))`` per completion with its
  own extraction and signal-based timeouts: fast, but not thread-safe and no hard limit.
"""

from __future__ import annotations

import argparse
import logging
import time

from jaxdebate.data import load_items
from jaxdebate.debate import Grader


def run_grader(pairs, **kwargs):
    with Grader(cache_size=0, **kwargs) as grader:
        grader.equivalent("\\frac{1}{2}", "0.5")  # start the worker outside the timing
        start = time.perf_counter()
        results = grader.is_correct_many([c for c, _ in pairs], [g for _, g in pairs])
        elapsed = time.perf_counter() - start
        stats = grader.stats
    return elapsed, sum(results), stats


def run_peer(pairs):
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    start = time.perf_counter()
    correct = 0
    for completion, gold in pairs:
        correct += bool(verify(parse("\\boxed{" + gold + "}"), parse(completion)))
    return time.perf_counter() - start, correct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="math500")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    items = [it for it in load_items(args.data, limit=args.limit) if it.meta.get("solution")]
    sets = {
        "matched": [(it.meta["solution"], it.answer) for it in items],
        "mismatched": [(it.meta["solution"], items[(i + 1) % len(items)].answer) for i, it in enumerate(items)],
    }
    print(f"{args.data}: {len(items)} gold solutions")
    print(f"{'set':<11} {'grader':<26} {'completions/s':>14} {'correct':>8} {'timeouts':>8} {'vs peer':>8}")
    for name, pairs in sets.items():
        peer_s, peer_ok = run_peer(pairs)
        rows = [("Grader", *run_grader(pairs)), ("Grader, no fast path", *run_grader(pairs, fast_path=False))]
        for label, seconds, ok, stats in rows:
            print(f"{name:<11} {label:<26} {len(pairs) / seconds:>14.1f} {ok:>8} {stats['timeouts']:>8} "
                  f"{peer_s / seconds:>7.2f}x")
        print(f"{name:<11} {'math-verify in-process':<26} {len(pairs) / peer_s:>14.1f} {peer_ok:>8} {'-':>8} {'1.00x':>8}")


if __name__ == "__main__":
    main()
