"""Greedy accuracy of the base model and of base + adapter on GSM8K-Platinum, side by side.

Each model's per-question results are appended to their own JSONL (resumable); the comparison joins
them by question id into one record per question and a summary with both accuracies, their
difference, and how many questions only one of the two got right.

Besides the protocol's extraction (``answer``/``correct``) every row grades two more (issue 28), so a
format regression cannot hide behind lenient parsing: **strict** — the number of a line of the form
``Answer: <number>``, the format every prompt asks for (no such line: no answer); **lenient** — the
``number`` extraction of :mod:`jaxdebate.debate.answers` (the answer line's last number, else the last
number of the text). ``format_ok`` says whether the strict line is there; its mean is the format rate.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxdebate import jsonl
from jaxdebate.coherence.arms import SEED_FORMAT, AnswerFormat, canonical_messages
from jaxdebate.data import Item
from jaxdebate.debate.answers import extract_answer
from jaxdebate.sampling.base import Sampler, SamplingParams
from jaxdebate.stats import mcnemar_test, wilson_interval

_ANSWER_LINE = re.compile(r"^[ \t]*Answer:[ \t]*\$?(-?[\d,]*\.?\d+)\$?\.?[ \t]*$", re.MULTILINE)


def strict_answer(text: str | None) -> str | None:
    """The number of the last ``Answer: <number>`` line of ``text`` (None without such a line)."""
    found = _ANSWER_LINE.findall(text or "")
    return extract_answer(f"Answer: {found[-1]}", "number") if found else None


def lenient_answer(text: str | None) -> str | None:
    """The answer line's last number, else the last number of the text (``number`` extraction)."""
    return extract_answer(text, "number")


def graded_rows(items: Sequence[Item], texts: Sequence[str], grader: Any, fmt: AnswerFormat) -> list[dict[str, Any]]:
    """Per item: the protocol's, the strict and the lenient answer, each graded against the gold
    answer (one grader round trip), and whether the strict answer line is present."""
    answers = [(fmt.extract(t), strict_answer(t), lenient_answer(t)) for t in texts]
    flags = grader.equivalent_many([(it.answer, a) for it, trio in zip(items, answers) for a in trio])
    return [
        {"answer": a, "correct": bool(flags[3 * k]), "answer_strict": s, "correct_strict": bool(flags[3 * k + 1]),
         "answer_lenient": lax, "correct_lenient": bool(flags[3 * k + 2]), "format_ok": s is not None}
        for k, (a, s, lax) in enumerate(answers)
    ]


def accuracy_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``n``, ``correct``, ``accuracy`` with its Wilson ``ci95``, ``format_rate``, ``strict_accuracy``,
    ``lenient_accuracy`` and ``truncated_rate`` (the share that hit the token limit; None for rows
    written before those were recorded)."""
    n = len(rows)
    k = sum(bool(r["correct"]) for r in rows)

    def rate(key: str) -> float | None:
        return sum(bool(r[key]) for r in rows) / n if n and all(key in r for r in rows) else None

    return {"n": n, "correct": k, "accuracy": k / n if n else None, "ci95": list(wilson_interval(k, n)),
            "format_rate": rate("format_ok"), "strict_accuracy": rate("correct_strict"),
            "lenient_accuracy": rate("correct_lenient"),
            "truncated_rate": (sum(r["finish_reason"] == "length" for r in rows) / n
                               if n and all("finish_reason" in r for r in rows) else None)}


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
    weights: str,
    decoder: str,
) -> list[dict[str, Any]]:
    """Answers of the sampler's current weights for ``items`` (greedy at ``temperature`` 0); returns
    the rows of ``out_path`` for ``items``. Rows already there are kept, not recomputed, when they were
    made with the same ``weights`` (what identifies the sampler's weights, e.g. an adapter's digest),
    ``decoder`` (backend, precision and machine: ``sampling.factory.decoder``), token budget,
    temperature and format: a DataError otherwise, never a silent mix."""
    from tqdm.auto import tqdm

    out_path = Path(out_path)
    jsonl.check_setting(out_path, {"weights": weights, "decoder": decoder, "max_tokens": max_tokens,
                                   "temperature": temperature, "format": dataclasses.asdict(fmt)},
                        what="answers", remedy="delete it or evaluate into another eval.dir")
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
            graded = graded_rows(batch, [c.text for c in completions], grader, fmt)
            jsonl.append_records(out_path, [
                {"id": it.id, "question": it.problem, "gold": it.answer, "text": c.text, **g,
                 "n_tokens": len(c.token_ids), "finish_reason": c.finish_reason}
                for it, c, g in zip(batch, completions, graded)
            ])
            bar.update(len(batch))
    finally:
        bar.close()
    wanted = {it.id for it in items}
    return [r for r in jsonl.read_records(out_path) if r["id"] in wanted]


_SIDE_KEYS = ("answer", "correct", "text", "n_tokens", "finish_reason", "answer_strict", "correct_strict",
              "answer_lenient", "correct_lenient", "format_ok")


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
            "base": {k: b[k] for k in _SIDE_KEYS if k in b},
            "dpo": {k: t[k] for k in _SIDE_KEYS if k in t},
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
    for side in ("base", "dpo"):
        figures = accuracy_summary([r[side] for r in rows])
        for key in ("format_rate", "strict_accuracy", "lenient_accuracy"):
            summary[f"{side}_{key}"] = figures[key]
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
    for side, label in (("base", "base"), ("dpo", "base + DPO")):
        if summary.get(f"{side}_format_rate") is not None:
            lines.append(f"{label}: answer line {pct(summary[f'{side}_format_rate']).strip()}, strict accuracy "
                         f"{pct(summary[f'{side}_strict_accuracy']).strip()}, lenient "
                         f"{pct(summary[f'{side}_lenient_accuracy']).strip()}")
    return "\n".join(lines)
