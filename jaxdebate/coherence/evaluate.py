"""Greedy accuracy of the base model and of base + adapter on GSM8K-Platinum, side by side.

Each model's per-question results are appended to their own JSONL (resumable); the comparison joins
them by question id into one record per question and a summary with both accuracies, their
difference, and how many questions only one of the two got right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxdebate.coherence import jsonl
from jaxdebate.coherence.arms import SEED_FORMAT, AnswerFormat, canonical_messages
from jaxdebate.data import Item
from jaxdebate.sampling.base import Sampler, SamplingParams
from jaxdebate.stats import mcnemar_test, wilson_interval


def evaluate(
    items: Sequence[Item],
    sampler: Sampler,
    tokenizer: Any,
    grader: Any,
    out_path: str | Path,
    *,
    max_tokens: int,
    batch_size: int,
    label: str,
    temperature: float = 0.0,
    fmt: AnswerFormat = SEED_FORMAT,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Answers of the sampler's current weights for ``items`` (greedy at ``temperature`` 0); returns
    the rows of ``out_path`` for ``items`` (rows already there are kept, not recomputed)."""
    from tqdm.auto import tqdm

    out_path = Path(out_path)
    done = jsonl.finished_keys(out_path)
    todo = [it for it in items if it.id not in done]
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=0)
    bar = tqdm(total=len(items), initial=len(items) - len(todo), desc=f"eval {label}", unit="q",
               disable=not progress, dynamic_ncols=True)
    try:
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            prompts = [tokenizer.encode_chat(canonical_messages(it.problem, fmt)) for it in batch]
            completions = [c[0] for c in sampler.generate(prompts, params)]
            answers = [fmt.extract(c.text) for c in completions]
            correct = grader.equivalent_many([(it.answer, a) for it, a in zip(batch, answers)])
            jsonl.append_records(out_path, [
                {"id": it.id, "question": it.problem, "gold": it.answer, "text": c.text, "answer": a,
                 "correct": bool(ok), "n_tokens": len(c.token_ids), "finish_reason": c.finish_reason}
                for it, c, a, ok in zip(batch, completions, answers, correct)
            ])
            bar.update(len(batch))
    finally:
        bar.close()
    wanted = {it.id for it in items}
    return [r for r in jsonl.read_records(out_path) if r["id"] in wanted]


def compare(
    items: Sequence[Item], base: Sequence[Mapping[str, Any]], tuned: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-question side-by-side rows (in item order) and the summary of the two models."""
    by_base = {r["id"]: r for r in base}
    by_tuned = {r["id"]: r for r in tuned}
    rows = []
    for it in items:
        b, t = by_base[it.id], by_tuned[it.id]
        rows.append({
            "id": it.id, "question": it.problem, "gold": it.answer,
            "base": {k: b[k] for k in ("answer", "correct", "text", "n_tokens", "finish_reason")},
            "dpo": {k: t[k] for k in ("answer", "correct", "text", "n_tokens", "finish_reason")},
        })
    n = len(rows)
    base_ok = sum(r["base"]["correct"] for r in rows)
    tuned_ok = sum(r["dpo"]["correct"] for r in rows)
    summary = {
        "questions": n,
        "base_correct": base_ok,
        "dpo_correct": tuned_ok,
        "base_accuracy": base_ok / n if n else None,
        "dpo_accuracy": tuned_ok / n if n else None,
        "delta": (tuned_ok - base_ok) / n if n else None,
        "both_correct": sum(r["base"]["correct"] and r["dpo"]["correct"] for r in rows),
        "only_base_correct": sum(r["base"]["correct"] and not r["dpo"]["correct"] for r in rows),
        "only_dpo_correct": sum(r["dpo"]["correct"] and not r["base"]["correct"] for r in rows),
        "base_no_answer": sum(r["base"]["answer"] is None for r in rows),
        "dpo_no_answer": sum(r["dpo"]["answer"] is None for r in rows),
        "base_truncated": sum(r["base"]["finish_reason"] == "length" for r in rows),
        "dpo_truncated": sum(r["dpo"]["finish_reason"] == "length" for r in rows),
    }
    if n:
        summary["base_ci95"] = list(wilson_interval(base_ok, n))
        summary["dpo_ci95"] = list(wilson_interval(tuned_ok, n))
        summary["mcnemar_p"] = mcnemar_test(summary["only_base_correct"], summary["only_dpo_correct"])
    return rows, summary


def format_comparison(summary: Mapping[str, Any], dataset: str) -> str:
    """The printed side-by-side table."""
    n = summary["questions"]

    def pct(x: float | None) -> str:
        return "   n/a" if x is None else f"{100 * x:6.2f}%"

    lines = [
        f"{dataset}: {n} questions, greedy",
        f"{'model':<14}{'correct':>9}{'accuracy':>10}{'no answer':>11}{'truncated':>11}",
        f"{'base':<14}{summary['base_correct']:>9}{pct(summary['base_accuracy']):>10}"
        f"{summary['base_no_answer']:>11}{summary['base_truncated']:>11}",
        f"{'base + DPO':<14}{summary['dpo_correct']:>9}{pct(summary['dpo_accuracy']):>10}"
        f"{summary['dpo_no_answer']:>11}{summary['dpo_truncated']:>11}",
        f"delta {'+' if (summary['delta'] or 0) >= 0 else ''}{pct(summary['delta']).strip()} "
        f"(only base right: {summary['only_base_correct']}, only DPO right: {summary['only_dpo_correct']}, "
        f"both: {summary['both_correct']}; McNemar p = {summary.get('mcnemar_p', float('nan')):.3g})",
    ]
    return "\n".join(lines)
