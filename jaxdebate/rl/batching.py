"""Training samples -> fixed-shape micro-batches, so the train step compiles a bounded number of times.

Each sample is one debate turn: prompt tokens + completion tokens (+ the sampler's log-probs of the
completion and the turn's advantage). Sequences are right-padded to a *length bucket* (powers of two
from ``min_bucket``, the last one ``max_len``), and the rows of a micro-batch to a power of two no larger
than the bucket's row budget (``rows_cap`` and ``max_tokens // length``). The set of possible shapes is
therefore fixed by the config, independent of what the sampler produced.

Per-token loss arrays live in a *completion window* of ``min(length, max_completion)`` positions per
row (the completion is contiguous after the prompt), so the output head — the vocabulary projection,
the largest matmul of a small model — runs only where the loss needs it, not over prompts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from jaxdebate.rl.losses import token_weights

MIN_BUCKET = 64


@dataclasses.dataclass(frozen=True)
class Sample:
    """One training sequence: ``prompt`` and ``completion`` token ids, the sampler's log-probs of the
    completion (same length) and the advantage applied to every completion token."""

    prompt: np.ndarray
    completion: np.ndarray
    sampler_logprobs: np.ndarray
    advantage: float

    def __post_init__(self) -> None:
        if len(self.completion) != len(self.sampler_logprobs):
            raise ValueError(
                f"sample has {len(self.completion)} completion tokens but "
                f"{len(self.sampler_logprobs)} sampler log-probs"
            )

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.completion)


def length_buckets(max_len: int, min_bucket: int = MIN_BUCKET) -> tuple[int, ...]:
    """Powers of two from ``min_bucket`` below ``max_len``, then ``max_len`` itself."""
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2, got {max_len}")
    buckets = []
    size = min(min_bucket, max_len)
    while size < max_len:
        buckets.append(size)
        size *= 2
    buckets.append(max_len)
    return tuple(buckets)


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _pow2_ceil(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


def rows_for_bucket(length: int, rows_cap: int, max_tokens: int, min_rows: int = 1) -> int:
    """The largest power-of-two row count allowed for sequences padded to ``length`` (at least
    ``min_rows``, e.g. the number of data-parallel devices)."""
    return max(_pow2_ceil(min_rows), _pow2_floor(max(1, min(rows_cap, max_tokens // length))))


def possible_shapes(max_len: int, rows_cap: int, max_tokens: int, min_bucket: int = MIN_BUCKET,
                    min_rows: int = 1) -> set[tuple[int, int]]:
    """Every ``(rows, length)`` :func:`make_microbatches` can produce for this configuration."""
    shapes = set()
    for length in length_buckets(max_len, min_bucket):
        top = rows_for_bucket(length, rows_cap, max_tokens, min_rows)
        rows = _pow2_ceil(min_rows)
        while rows <= top:
            shapes.add((rows, length))
            rows *= 2
    return shapes


def rows_cap_for(max_samples_per_step: int, n_microbatches: int) -> int:
    """Row budget per micro-batch when a step's samples are split into ``n_microbatches``."""
    return _pow2_ceil(math.ceil(max_samples_per_step / max(1, n_microbatches)))


def make_microbatches(
    samples: Sequence[Sample],
    *,
    max_len: int,
    rows_cap: int,
    max_tokens: int,
    aggregation: str,
    max_completion: int | None = None,
    pad_id: int = 0,
    min_bucket: int = MIN_BUCKET,
    min_rows: int = 1,
) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
    """Pack ``samples`` into micro-batches of shapes from :func:`possible_shapes`.

    Returns ``(micro_batches, stats)``. Each micro-batch holds ``tokens`` i32 [R, L] and
    ``attention_mask`` bool [R, L]; ``window_start`` i32 [R] (the position whose hidden state predicts
    the first completion token, i.e. prompt length - 1); in the window ``[R, C]`` with
    ``C = min(L, max_completion)``: ``targets`` i32 (completion tokens), ``loss_mask`` bool,
    ``sampler_logprobs`` f32, ``token_weights`` f32 (the aggregation over *all* samples of the step);
    and ``advantages`` f32 [R]. Completions longer than ``max_completion`` or running past ``max_len``
    are cut (counted in ``stats``).
    """
    max_completion = max_len if max_completion is None else int(max_completion)
    if max_completion < 1:
        raise ValueError(f"max_completion must be >= 1, got {max_completion}")
    buckets = length_buckets(max_len, min_bucket)
    n_cut = 0
    prepared = []
    for s in samples:
        prompt = np.asarray(s.prompt, np.int32)
        completion = np.asarray(s.completion, np.int32)
        lps = np.asarray(s.sampler_logprobs, np.float32)
        if not 1 <= len(prompt) < max_len:
            raise ValueError(
                f"a prompt of {len(prompt)} tokens does not fit the learner's max length {max_len} "
                "(prompts need at least one token)"
            )
        keep = min(max_len - len(prompt), max_completion)
        if len(completion) > keep:
            completion, lps = completion[:keep], lps[:keep]
            n_cut += 1
        prepared.append((prompt, completion, lps, float(s.advantage)))
    total_tokens = sum(len(c) for _, c, _, _ in prepared)
    total_sequences = sum(1 for _, c, _, _ in prepared if len(c))

    by_bucket: dict[int, list] = {}
    for item in sorted(prepared, key=lambda x: -(len(x[0]) + len(x[1]))):
        length = len(item[0]) + len(item[1])
        bucket = next(b for b in buckets if b >= length)
        by_bucket.setdefault(bucket, []).append(item)

    micro_batches = []
    padded_tokens = 0
    for length in sorted(by_bucket, reverse=True):
        items = by_bucket[length]
        top = rows_for_bucket(length, rows_cap, max_tokens, min_rows)
        for start in range(0, len(items), top):
            chunk = items[start:start + top]
            rows = min(top, max(_pow2_ceil(len(chunk)), _pow2_ceil(min_rows)))
            mb = _pack(chunk, rows, length, min(length, max_completion), pad_id)
            mb["token_weights"] = token_weights(
                mb["loss_mask"], aggregation, total_tokens=total_tokens, total_sequences=total_sequences
            ).astype(np.float32)
            micro_batches.append(mb)
            padded_tokens += rows * length
    stats = {
        "samples": float(len(prepared)),
        "completion_tokens": float(total_tokens),
        "sequence_tokens": float(sum(len(p) + len(c) for p, c, _, _ in prepared)),
        "padded_tokens": float(padded_tokens),
        "microbatches": float(len(micro_batches)),
        "cut_completions": float(n_cut),
    }
    return micro_batches, stats


def _pack(items, rows: int, length: int, window: int, pad_id: int) -> dict[str, np.ndarray]:
    tokens = np.full((rows, length), pad_id, np.int32)
    attention = np.zeros((rows, length), bool)
    start = np.zeros((rows,), np.int32)
    targets = np.full((rows, window), pad_id, np.int32)
    loss_mask = np.zeros((rows, window), bool)
    sampler_lp = np.zeros((rows, window), np.float32)
    advantages = np.zeros((rows,), np.float32)
    for i, (prompt, completion, lps, adv) in enumerate(items):
        p, c = len(prompt), len(completion)
        tokens[i, :p] = prompt
        tokens[i, p:p + c] = completion
        attention[i, :p + c] = True
        start[i] = p - 1
        targets[i, :c] = completion
        loss_mask[i, :c] = True
        sampler_lp[i, :c] = lps
        advantages[i] = adv
    return {
        "tokens": tokens,
        "attention_mask": attention,
        "window_start": start,
        "targets": targets,
        "loss_mask": loss_mask,
        "sampler_logprobs": sampler_lp,
        "advantages": advantages,
    }
