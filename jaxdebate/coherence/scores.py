"""Coherence scores of one question's trajectories — pure functions of answers, texts and lengths.

Notation: a question has trajectories ``i = 1..n`` with final-answer keys ``a_i`` (``None`` = no answer;
equal keys = equivalent answers), word sets ``W_i`` (lower-cased words and numbers of the text) and
lengths ``L_i`` (completion tokens). ``J(X, Y) = |X ∩ Y| / |X ∪ Y|`` (1 when both are empty).

==============  ==================================================================================
score           formula
==============  ==================================================================================
``s_end``       share of trajectories whose answer equals the plurality answer (0 if nobody answers)
``s_path``      ``w_len · (1 − min(1, std(L) / mean(L))) + (1 − w_len) · mean_{i<j} J(W_i, W_j)``,
                ``w_len = 0.4``
``s_cf``        ``mean_{p ∈ {A, A′}} [a_CF1 = a_p]``; a missing answer on either side is disagreement
conciseness     ``c_i = min_j L_j / L_i`` (1 for the shortest; lengths floored at 1 token)
alignment       ``g_i = mean_{p ∈ {A, A′}, p ≠ i} (½ [a_i = a_p] + ½ J(W_i, W_p))``
quality         ``q_i = w_c · c_i + (1 − w_c) · g_i``, ``w_c = 0.4``
reward          ``r_i = [correct_i] + λ · (½ q_i + ½ · (s_end + s_path + s_cf) / 3)``, ``λ = 0.2``
==============  ==================================================================================

All scores lie in [0, 1] (the reward in [0, 1 + λ]).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np

_WORD = re.compile(r"[a-z]+|\d+(?:\.\d+)?")


def word_set(text: str) -> frozenset[str]:
    """Lower-cased words and numbers of a text (the unit of the Jaccard overlaps)."""
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets are identical (1.0)."""
    union = len(a | b)
    return 1.0 if union == 0 else len(a & b) / union


def s_end(answers: Sequence[Hashable | None]) -> float:
    """Answer agreement: the share of trajectories giving the plurality answer (0 when none answers)."""
    given = [a for a in answers if a is not None]
    if not answers or not given:
        return 0.0
    return Counter(given).most_common(1)[0][1] / len(answers)


def length_coherence(lengths: Sequence[int]) -> float:
    """1 − coefficient of variation of the lengths, clipped to [0, 1] (1 when all lengths are equal)."""
    arr = np.asarray(lengths, dtype=np.float64)
    if arr.size == 0 or arr.mean() == 0:
        return 1.0
    return float(1.0 - min(1.0, arr.std() / arr.mean()))


def mean_pairwise_jaccard(sets: Sequence[frozenset[str]]) -> float:
    """Mean Jaccard overlap over all unordered pairs (1.0 for fewer than two trajectories)."""
    pairs = list(itertools.combinations(sets, 2))
    if not pairs:
        return 1.0
    return float(np.mean([jaccard(a, b) for a, b in pairs]))


def s_path(sets: Sequence[frozenset[str]], lengths: Sequence[int], length_weight: float = 0.4) -> float:
    """Reasoning-path coherence: ``length_weight`` · length coherence + the rest · token Jaccard overlap."""
    return length_weight * length_coherence(lengths) + (1.0 - length_weight) * mean_pairwise_jaccard(sets)


def s_cf(cf_answer: Hashable | None, probe_answers: Sequence[Hashable | None]) -> float:
    """Counterfactual robustness: the share of probes (A, A′) whose answer CF1 reproduces.

    CF1's question differs from A's only by a premise that changes no quantity, so a robust solver
    agrees; a missing answer (CF1's or a probe's) counts as disagreement.
    """
    if not probe_answers:
        return 0.0
    return float(np.mean([cf_answer is not None and cf_answer == p for p in probe_answers]))


def conciseness(lengths: Sequence[int]) -> np.ndarray:
    """``min(L) / L_i`` with lengths floored at one token: 1 for the shortest trajectory, smaller for longer."""
    arr = np.maximum(np.asarray(lengths, dtype=np.float64), 1.0)
    if arr.size == 0:
        return arr
    return arr.min() / arr


def alignment(
    answers: Sequence[Hashable | None], sets: Sequence[frozenset[str]], probe_indices: Sequence[int]
) -> np.ndarray:
    """Agreement of each trajectory with the canonical probes: mean over probes p ≠ i of
    ½ [same answer] + ½ Jaccard(words). A trajectory with no other probe to compare with gets 0."""
    out = np.zeros(len(answers), dtype=np.float64)
    for i in range(len(answers)):
        sims = [
            0.5 * float(answers[i] is not None and answers[i] == answers[p]) + 0.5 * jaccard(sets[i], sets[p])
            for p in probe_indices
            if p != i
        ]
        out[i] = float(np.mean(sims)) if sims else 0.0
    return out


def quality(conc: np.ndarray, align: np.ndarray, conciseness_weight: float = 0.4) -> np.ndarray:
    """Per-trajectory quality: ``conciseness_weight`` · conciseness + the rest · probe alignment."""
    return conciseness_weight * conc + (1.0 - conciseness_weight) * align


@dataclasses.dataclass(frozen=True)
class QuestionScores:
    """All scores of one question: three question-level numbers and per-trajectory arrays."""

    s_end: float
    s_path: float
    s_cf: float
    conciseness: tuple[float, ...]
    alignment: tuple[float, ...]
    quality: tuple[float, ...]
    reward: tuple[float, ...]


def score_question(
    answers: Sequence[Hashable | None],
    texts: Sequence[str],
    lengths: Sequence[int],
    correct: Sequence[bool],
    roles: Sequence[str],
    *,
    path_length_weight: float = 0.4,
    conciseness_weight: float = 0.4,
    coherence_weight: float = 0.2,
) -> QuestionScores:
    """Score one question's trajectories (see the module docstring for every formula).

    ``roles[i]`` is the arm role of trajectory i (``variance``, ``A``, ``A_prime`` or ``CF1``); exactly
    one ``CF1`` and at least one of ``A``/``A_prime`` must be present.
    """
    n = len(answers)
    if not (len(texts) == len(lengths) == len(correct) == len(roles) == n):
        raise ValueError(
            f"score_question: answers/texts/lengths/correct/roles have lengths "
            f"{n}/{len(texts)}/{len(lengths)}/{len(correct)}/{len(roles)}"
        )
    probes = [i for i, r in enumerate(roles) if r in ("A", "A_prime")]
    cf = [i for i, r in enumerate(roles) if r == "CF1"]
    if not probes or len(cf) != 1:
        raise ValueError(f"score_question needs an A or A_prime probe and exactly one CF1; roles were {list(roles)}")
    sets = [word_set(t) for t in texts]
    end = s_end(answers)
    path = s_path(sets, lengths, path_length_weight)
    cfs = s_cf(answers[cf[0]], [answers[p] for p in probes])
    conc = conciseness(lengths)
    align = alignment(answers, sets, probes)
    qual = quality(conc, align, conciseness_weight)
    question_level = (end + path + cfs) / 3.0
    reward = np.asarray(correct, dtype=np.float64) + coherence_weight * (0.5 * qual + 0.5 * question_level)
    return QuestionScores(
        s_end=end,
        s_path=path,
        s_cf=cfs,
        conciseness=tuple(float(x) for x in conc),
        alignment=tuple(float(x) for x in align),
        quality=tuple(float(x) for x in qual),
        reward=tuple(float(x) for x in reward),
    )
