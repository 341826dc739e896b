"""Training samples -> micro-batches of a bounded set of shapes, packed so that no FLOP is spent twice.

Each sample is one debate turn: prompt tokens + completion tokens (+ the sampler's log-probs of the
completion and the turn's advantage). Two layouts share one batch format:

- **packed** (the default): samples whose prompts start alike form a *group* that stores their common
  prompt prefix once, followed by each member's own tokens. The 12 round-1 turns of a debate prompt (4
  debates x 3 agents) share their whole prompt; round-2 turns share the question and the worked
  example. Groups are packed first-fit into rows of up to ``max_len`` tokens. Attention stays within a
  member plus its group's prefix; positions restart per member as if it were alone, so log-probs and
  gradients equal the unpacked ones (the prefix's activations are shared, their gradients summed).
- **unpacked**: one sample per row, right-padded.

A micro-batch holds, per row, ``tokens``, ``positions``, ``segment_ids`` (0 = padding) and
``prefix_ids`` (the segment a token may attend to besides its own), all ``[R, L]``; and in a *loss
window* ``[R, C]``: ``window_index`` (the row position whose hidden state predicts the target),
``targets``, ``loss_mask``, ``sampler_logprobs``, ``advantages``, ``token_weights`` (the
aggregation over *all* samples of the step) and ``window_sequence`` (which sample of the row the
token belongs to: 1, 2, ... in window order, 0 = no token; what a per-sequence loss such as GSPO
reduces by, since a packed row holds several samples). The output head -- the largest matmul of a
small model -- runs only on the window, not over prompts. ``L`` is a power of two from ``min_bucket``
(capped at ``max_len``), ``C`` and ``R`` powers of two or 1.5 times one (``C`` capped at ``L``), so the
step compiles a bounded number of times.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from jaxdebate.rl.losses import token_weights
from jaxdebate.shapes import group_prefixes, pow2_ceil, pow2_floor, sizes_upto

MIN_BUCKET = 64
FORWARD_KEYS = ("tokens", "positions", "segment_ids", "prefix_ids")
WINDOW_KEYS = ("window_index", "targets", "loss_mask")


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


def window_buckets(length: int, min_bucket: int = MIN_BUCKET) -> tuple[int, ...]:
    """Loss-window widths for rows of ``length``: powers of two and 1.5 times one from ``min_bucket``
    below ``length``, then ``length``. Why finer than the rows' buckets: the window sets the output
    head's work, and a power-of-two window alone wastes up to half of it (384 completion tokens took
    512), for no more than twice the compiled shapes."""
    return tuple(c for c in sizes_upto(length) if min(min_bucket, length) <= c < length) + (length,)


def bucket_for(n: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``n``."""
    return next(b for b in buckets if b >= n)


def rows_for_bucket(length: int, rows_cap: int, max_tokens: int, min_rows: int = 1) -> int:
    """The largest power-of-two row count allowed for rows of ``length`` tokens (at least ``min_rows``,
    e.g. the number of data-parallel devices)."""
    return max(pow2_ceil(min_rows), pow2_floor(max(1, min(rows_cap, max_tokens // length))))


def possible_shapes(max_len: int, rows_cap: int, max_tokens: int, min_bucket: int = MIN_BUCKET,
                    min_rows: int = 1) -> set[tuple[int, int, int]]:
    """Every ``(rows, length, window)`` :func:`make_microbatches` can produce for this configuration."""
    buckets = length_buckets(max_len, min_bucket)
    shapes = set()
    for length in buckets:
        top = rows_for_bucket(length, rows_cap, max_tokens, min_rows)
        windows = window_buckets(length, min_bucket)
        for rows in sizes_upto(top, min_rows):
            shapes |= {(rows, length, w) for w in windows}
    return shapes


def rows_cap_for(max_samples_per_step: int, n_microbatches: int) -> int:
    """Row budget per micro-batch when a step's samples are split into ``n_microbatches``."""
    return pow2_ceil(math.ceil(max_samples_per_step / max(1, n_microbatches)))


@dataclasses.dataclass
class _Prepared:
    prompt: np.ndarray
    completion: np.ndarray
    logprobs: np.ndarray
    advantage: float
    weight: float = 0.0  # loss weight of each completion token

    @property
    def tokens(self) -> np.ndarray:
        return np.concatenate([self.prompt, self.completion])


@dataclasses.dataclass
class _Group:
    """Members that share ``prefix`` (a prefix of each member's prompt); ``size`` tokens once laid out."""

    prefix: int
    members: list[_Prepared]

    @property
    def size(self) -> int:
        return self.prefix + sum(len(m.prompt) + len(m.completion) - self.prefix for m in self.members)

    @property
    def completion_tokens(self) -> int:
        return sum(len(m.completion) for m in self.members)


def share_prefixes(samples: Sequence[_Prepared], max_len: int) -> list[_Group]:
    """Groups of samples with a common prompt prefix stored once, each fitting ``max_len``."""
    groups = group_prefixes([p.prompt for p in samples], [len(p.prompt) for p in samples],
                            [len(p.prompt) + len(p.completion) for p in samples], max_size=max_len)
    return [_Group(prefix, [samples[i] for i in members]) for prefix, members in groups]


def _rows_first_fit(groups: list[_Group], max_len: int) -> list[list[_Group]]:
    rows: list[list[_Group]] = []
    fill: list[int] = []
    for g in sorted(groups, key=lambda g: -g.size):
        i = next((i for i, f in enumerate(fill) if f + g.size <= max_len), None)
        if i is None:
            rows.append([g])
            fill.append(g.size)
        else:
            rows[i].append(g)
            fill[i] += g.size
    return rows


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
    packing: bool = True,
    split_short_rows: bool = False,
) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
    """Lay ``samples`` out in micro-batches (module docstring), each of a shape in
    :func:`possible_shapes`. Returns ``(micro_batches, stats)``.

    ``split_short_rows``: a row whose length bucket is at most half its micro-batch's starts the next
    micro-batch, in its own bucket (e.g. 571 packed tokens: 512 + 64 positions instead of 2 x 512); the
    same loss and gradients, summed in another order, for one more micro-batch.

    Completions longer than ``max_completion`` or running past ``max_len`` are cut (counted in
    ``stats``); ``padded_tokens`` counts the row positions computed, ``sequence_tokens`` what the
    samples would take one per row without padding.
    """
    max_completion = max_len if max_completion is None else int(max_completion)
    if max_completion < 1:
        raise ValueError(f"max_completion must be >= 1, got {max_completion}")
    buckets = length_buckets(max_len, min_bucket)
    prepared, n_cut = _prepare(samples, max_len, max_completion)
    total_tokens = sum(len(p.completion) for p in prepared)
    total_sequences = sum(1 for p in prepared if len(p.completion))
    for p in prepared:
        c = len(p.completion)
        p.weight = float(token_weights(np.ones((1, max(c, 1)), bool), aggregation, total_tokens=total_tokens,
                                       total_sequences=total_sequences, max_completion=max_completion)[0, 0]
                         ) if c else 0.0

    if packing:
        rows = _rows_first_fit(share_prefixes(prepared, max_len), max_len)
    else:
        rows = [[_Group(len(p.prompt), [p])] for p in prepared]
    rows.sort(key=lambda r: -sum(g.size for g in r))
    row_buckets = [bucket_for(sum(g.size for g in r), buckets) for r in rows]

    micro_batches = []
    padded_tokens = 0
    start = 0
    while start < len(rows):
        length = row_buckets[start]
        top = rows_for_bucket(length, rows_cap, max_tokens, min_rows)
        end = min(start + top, len(rows))
        if split_short_rows:  # rows are sorted longest first: the first short one ends the chunk
            end = next((i for i in range(start + 1, end) if 2 * row_buckets[i] <= length), end)
        chunk = rows[start:end]
        start = end
        n_rows = next(c for c in sizes_upto(top, min_rows) if c >= len(chunk))
        longest_window = max(sum(g.completion_tokens for g in r) for r in chunk)
        window = bucket_for(longest_window, window_buckets(length, min_bucket))
        micro_batches.append(_layout(chunk, n_rows, length, window, pad_id))
        padded_tokens += n_rows * length
    stats = {
        "samples": float(len(prepared)),
        "completion_tokens": float(total_tokens),
        "sequence_tokens": float(sum(len(p.prompt) + len(p.completion) for p in prepared)),
        "packed_tokens": float(sum(g.size for r in rows for g in r)),
        "padded_tokens": float(padded_tokens),
        "microbatches": float(len(micro_batches)),
        "cut_completions": float(n_cut),
    }
    return micro_batches, stats


def _prepare(samples: Sequence[Sample], max_len: int, max_completion: int) -> tuple[list[_Prepared], int]:
    prepared, n_cut = [], 0
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
        prepared.append(_Prepared(prompt, completion, lps, float(s.advantage)))
    return prepared, n_cut


def _layout(rows: list[list[_Group]], n_rows: int, length: int, window: int, pad_id: int) -> dict[str, np.ndarray]:
    """Arrays of one micro-batch: each row's groups laid out as prefix, then each member's own tokens."""
    out = {
        "tokens": np.full((n_rows, length), pad_id, np.int32),
        "positions": np.zeros((n_rows, length), np.int32),
        "segment_ids": np.zeros((n_rows, length), np.int32),
        "prefix_ids": np.zeros((n_rows, length), np.int32),
        "window_index": np.zeros((n_rows, window), np.int32),
        "targets": np.full((n_rows, window), pad_id, np.int32),
        "loss_mask": np.zeros((n_rows, window), bool),
        "sampler_logprobs": np.zeros((n_rows, window), np.float32),
        "advantages": np.zeros((n_rows, window), np.float32),
        "token_weights": np.zeros((n_rows, window), np.float32),
        "window_sequence": np.zeros((n_rows, window), np.int32),
    }
    for r, groups in enumerate(rows):
        at, w, seg, seq = 0, 0, 0, 0
        for g in groups:
            seg += 1
            prefix_seg, prefix_at = seg, at
            head = g.members[0].prompt[:g.prefix]
            out["tokens"][r, at:at + g.prefix] = head
            out["positions"][r, at:at + g.prefix] = np.arange(g.prefix)
            out["segment_ids"][r, at:at + g.prefix] = prefix_seg
            out["prefix_ids"][r, at:at + g.prefix] = prefix_seg
            at += g.prefix
            for m in g.members:
                seg += 1
                own = m.tokens[g.prefix:]
                n = len(own)
                out["tokens"][r, at:at + n] = own
                out["positions"][r, at:at + n] = np.arange(g.prefix, g.prefix + n)
                out["segment_ids"][r, at:at + n] = seg
                out["prefix_ids"][r, at:at + n] = prefix_seg
                # the hidden state at sequence position j lives at row index prefix_at + j (j < prefix)
                # or at + j - prefix (j >= prefix)
                p, c = len(m.prompt), len(m.completion)
                j = np.arange(p - 1, p - 1 + c)
                idx = np.where(j < g.prefix, prefix_at + j, at + j - g.prefix)
                out["window_index"][r, w:w + c] = idx
                out["targets"][r, w:w + c] = m.completion
                out["loss_mask"][r, w:w + c] = True
                out["sampler_logprobs"][r, w:w + c] = m.logprobs
                out["advantages"][r, w:w + c] = m.advantage
                out["token_weights"][r, w:w + c] = m.weight
                seq += int(c > 0)
                out["window_sequence"][r, w:w + c] = seq
                at += n
                w += c
    return out


def pack_samples(samples: list[Sample]) -> dict[str, np.ndarray]:
    """Training samples as flat arrays plus lengths (what :func:`distributed.broadcast_arrays` sends)."""
    return {
        "prompt": np.concatenate([s.prompt for s in samples]),
        "prompt_len": np.asarray([len(s.prompt) for s in samples]),
        "completion": np.concatenate([s.completion for s in samples]),
        "logprobs": np.concatenate([s.sampler_logprobs for s in samples]),
        "completion_len": np.asarray([len(s.completion) for s in samples]),
        "advantage": np.asarray([s.advantage for s in samples], np.float64),
    }


def unpack_samples(arrays: dict[str, np.ndarray]) -> list[Sample]:
    """The inverse of :func:`pack_samples` (same values and dtypes)."""
    prompts = np.split(arrays["prompt"], np.cumsum(arrays["prompt_len"])[:-1])
    cuts = np.cumsum(arrays["completion_len"])[:-1]
    completions, logprobs = np.split(arrays["completion"], cuts), np.split(arrays["logprobs"], cuts)
    return [Sample(p, c, lp, float(a)) for p, c, lp, a in zip(prompts, completions, logprobs, arrays["advantage"])]
