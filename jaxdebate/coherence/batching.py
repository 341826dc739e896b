"""Preference pairs as fixed-shape token arrays for the jitted DPO step.

A pair becomes two right-padded sequences ``prompt + completion`` (chosen, rejected) that share the
canonical prompt (:func:`jaxdebate.coherence.arms.canonical_messages`). A pair that carries the sampled
token ids (``chosen_tokens``/``rejected_tokens``: canonical twins, sampled under that very prompt)
trains on them verbatim; otherwise the text is tokenized and a completion that ended on its own gets
the end-of-turn token appended, as the sampler produced it. Sequences longer than
``max_length`` lose the end of their completion; a prompt that leaves no room for a completion drops the
pair. Lengths are rounded up to a multiple of ``length_bucket`` so the step compiles a bounded number of
times; an update of ``grad_accumulation × batch_size`` pairs is padded with zero-weight pairs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxdebate.coherence.arms import SEED_FORMAT, AnswerFormat, canonical_messages


@dataclasses.dataclass(frozen=True)
class PairTokens:
    """Token ids of one pair: the shared prompt, and each completion (without the prompt)."""

    prompt: tuple[int, ...]
    chosen: tuple[int, ...]
    rejected: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Encoded:
    """All encodable pairs, plus which input pairs they came from and what was cut."""

    pairs: tuple[PairTokens, ...]
    source_index: tuple[int, ...]
    n_truncated: int
    n_dropped: int


def encode_pairs(pairs: Sequence[Mapping[str, Any]], tokenizer: Any, max_length: int,
                 fmt: AnswerFormat = SEED_FORMAT) -> Encoded:
    """Tokenize pairs (see the module docstring for truncation and the end-of-turn token)."""
    out, index, truncated, dropped = [], [], 0, 0
    prompt_cache: dict[str, tuple[int, ...]] = {}
    for i, pair in enumerate(pairs):
        question = pair["question"]
        if question not in prompt_cache:
            prompt_cache[question] = tuple(tokenizer.encode_chat(canonical_messages(question, fmt)))
        prompt = prompt_cache[question]
        room = max_length - len(prompt)
        if room < 1:
            dropped += 1
            continue
        completions = []
        for side in ("chosen", "rejected"):
            if f"{side}_tokens" in pair:
                ids = [int(t) for t in pair[f"{side}_tokens"]]  # what the sampler drew, EOS included
            else:
                ids = list(tokenizer.encode(pair[side]))
                if pair.get(f"{side}_finish_reason", "stop") == "stop":
                    ids.append(tokenizer.eos_id)
            if len(ids) > room:
                truncated += 1
                ids = ids[:room]
            completions.append(tuple(ids))
        out.append(PairTokens(prompt, completions[0], completions[1]))
        index.append(i)
    return Encoded(tuple(out), tuple(index), truncated, dropped)


def bucket_length(n: int, bucket: int, max_length: int) -> int:
    """``n`` rounded up to a multiple of ``bucket``, at most ``max_length``."""
    return min(max_length, -(-n // bucket) * bucket)


def _fill(row_tokens: np.ndarray, row_mask: np.ndarray, row_cmask: np.ndarray, prompt, completion) -> None:
    n_p, n_c = len(prompt), len(completion)
    row_tokens[:n_p] = prompt
    row_tokens[n_p:n_p + n_c] = completion
    row_mask[: n_p + n_c] = True
    row_cmask[n_p:n_p + n_c] = True


def make_update(
    encoded: Sequence[PairTokens],
    indices: Sequence[int],
    *,
    batch_size: int,
    grad_accumulation: int,
    length_bucket: int,
    max_length: int,
    pad_id: int,
) -> dict[str, np.ndarray]:
    """Arrays for one optimiser update over the pairs ``indices`` (at most ``batch_size × grad_accumulation``).

    Shapes (K = grad_accumulation, B = batch_size, T = bucketed length): ``tokens``, ``mask``,
    ``completion_mask`` ``[K, 2B, T]`` (rows 0..B−1 chosen, B..2B−1 rejected), ``weights`` ``[K, B]``
    (1 for real pairs) and ``index`` ``[K, B]`` (position in ``encoded``; 0 for padding).
    """
    k, b = grad_accumulation, batch_size
    if not 0 < len(indices) <= k * b:
        raise ValueError(f"an update holds 1..{k * b} pairs, got {len(indices)}")
    longest = max(len(encoded[i].prompt) + max(len(encoded[i].chosen), len(encoded[i].rejected)) for i in indices)
    t = bucket_length(longest, length_bucket, max_length)
    tokens = np.full((k, 2 * b, t), pad_id, np.int32)
    mask = np.zeros((k, 2 * b, t), bool)
    cmask = np.zeros((k, 2 * b, t), bool)
    weights = np.zeros((k, b), np.float32)
    index = np.zeros((k, b), np.int32)
    for slot, i in enumerate(indices):
        m, r = divmod(slot, b)
        p = encoded[i]
        _fill(tokens[m, r], mask[m, r], cmask[m, r], p.prompt, p.chosen)
        _fill(tokens[m, b + r], mask[m, b + r], cmask[m, b + r], p.prompt, p.rejected)
        weights[m, r] = 1.0
        index[m, r] = i
    return {"tokens": tokens, "mask": mask, "completion_mask": cmask, "weights": weights, "index": index}


def updates(order: Sequence[int], per_update: int) -> Iterator[list[int]]:
    """Consecutive chunks of ``per_update`` pair indices (the last one may be shorter)."""
    order = list(order)
    for start in range(0, len(order), per_update):
        yield order[start:start + per_update]
