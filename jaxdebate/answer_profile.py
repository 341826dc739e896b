"""What each run answered at its last validation, read from its per-item rows: debates that ended
without a number, the commonest answer and how many items got it, how many distinct answers there
were. A fallen accuracy can be a lost format (no answer) or lost content (one number for every item);
the rows tell which, the accuracy alone does not. Descriptive only: no test, no claim.
``python -m jaxdebate.analysis SWEEP --results DIR`` writes the table as ``DIR/answers.md``.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

from jaxdebate import validation_files
from jaxdebate.run_endpoints import VAL_DEBATE_HELDOUT, metric_number

TRAIN_TEAM = "train/accuracy/team"
COMPLETION_TOKENS = "train/completion_tokens_mean"
COLLAPSED = 0.10  # the README's mark for a run that ended below this accuracy


@dataclasses.dataclass(frozen=True)
class AnswerProfile:
    """One run's answers at its last validation (``set``/``mode`` rows) and the curve that led there."""

    name: str
    step: int
    items: int
    accuracy: float
    no_answer: int  # items whose final answer is missing (no number parsed)
    top_answer: str | None  # the commonest final answer (None when none was given)
    top_count: int
    distinct: int  # distinct final answers, a missing one not counted
    curve: tuple[tuple[int, float], ...]  # (step, held-out debate accuracy) at every validation
    zero_train_steps: tuple[int, int]  # (steps whose training-team accuracy was 0, steps with one)
    completion_tokens: tuple[float | None, float | None]  # mean per turn at the first and the last step


def answer_profile(run, set: str = "heldout", mode: str = "debate") -> AnswerProfile | None:
    """The profile of one run (an :class:`jaxdebate.sweep_runs.Run`); None when it has no per-item rows
    of that set and mode."""
    files = validation_files.steps(run.workdir)
    if not files:
        return None
    step, path = files[-1]
    rows = [r for r in validation_files.read(path) if r["set"] == set and r["mode"] == mode]
    if not rows:
        return None
    answers = collections.Counter(r["answer"] for r in rows if r["answer"] is not None)
    top, top_count = answers.most_common(1)[0] if answers else (None, 0)
    curve = tuple((r["step"], v) for r in run.records
                  if "step" in r and (v := metric_number(r.get(VAL_DEBATE_HELDOUT))) is not None)
    train = [metric_number(r[TRAIN_TEAM]) for r in run.records if TRAIN_TEAM in r]
    tokens = [metric_number(r[COMPLETION_TOKENS]) for r in run.records if COMPLETION_TOKENS in r]
    return AnswerProfile(
        name=run.name, step=step, items=len(rows), accuracy=sum(bool(r["correct_final"]) for r in rows) / len(rows),
        no_answer=sum(r["answer"] is None for r in rows), top_answer=top, top_count=top_count,
        distinct=len(answers), curve=curve,
        zero_train_steps=(sum(v == 0.0 for v in train), len(train)),
        completion_tokens=(tokens[0], tokens[-1]) if tokens else (None, None),
    )


def top_cell(p: AnswerProfile) -> str:
    """The commonest answer and its count as ``answers.md`` writes it (``–`` when no debate gave one)."""
    return "–" if p.top_answer is None else f"`{p.top_answer}` × {p.top_count}"


def tokens_cell(p: AnswerProfile) -> str:
    """Mean completion tokens per turn at the first and the last step, ``first → last``."""
    return " → ".join("–" if t is None else f"{t:.1f}" for t in p.completion_tokens)


def format_profiles(profiles: Sequence[AnswerProfile]) -> str:
    """The markdown table of ``answers.md``: one row per run, accuracies below :data:`COLLAPSED` in bold."""
    steps = sorted({s for p in profiles for s, _ in p.curve})
    lines = [
        "# What each run answered (descriptive)",
        "",
        "Held-out 3x2 debates at each run's last validation, from its `validation/step_<N>.jsonl` rows:",
        "how many ended without a number, the commonest final answer and on how many items, the number of",
        "distinct answers; the debate accuracy at every validation; the training steps whose team accuracy",
        "was 0 (of those logged); the mean completion tokens per turn at the first and the last step. Accuracies",
        f"below {COLLAPSED:.2f} are in bold. Written by `python -m jaxdebate.analysis --results`; no test, no claim.",
        "",
        "| run | items | no answer | commonest answer | distinct | "
        + " | ".join(f"step {s}" for s in steps) + " | steps at train team acc 0 | tokens first → last |",
        "|---|---|---|---|---|" + "---|" * len(steps) + "---|---|",
    ]
    for p in profiles:
        at = dict(p.curve)
        cells = [f"**{at[s]:.3f}**" if s in at and at[s] < COLLAPSED else (f"{at[s]:.3f}" if s in at else "–")
                 for s in steps]
        lines.append(f"| {p.name} | {p.items} | {p.no_answer} | {top_cell(p)} | {p.distinct} | " + " | ".join(cells)
                     + f" | {p.zero_train_steps[0]} of {p.zero_train_steps[1]} | {tokens_cell(p)} |")
    return "\n".join(lines) + "\n"


def profiles(runs: Sequence[Any]) -> list[AnswerProfile]:
    """The profiles of the runs that have per-item rows, in the order given."""
    return [p for p in (answer_profile(r) for r in runs) if p is not None]

