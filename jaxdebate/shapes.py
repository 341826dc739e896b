"""Static shapes and shared prefixes: the two tricks that keep jitted code fast on token batches.

Jitted functions compile once per shape, so batch dimensions are rounded up to a small fixed set of
sizes (powers of two and 1.5x powers of two: a padded dimension wastes at most a third). Batches of
prompts that start alike (a system prompt, a worked example, a debate's question) store their common
prefix once; :func:`group_prefixes` decides which sequences share which prefix.
"""

from __future__ import annotations

from collections.abc import Sequence


def pow2_floor(n: int) -> int:
    """Largest power of two <= max(n, 1)."""
    return 1 << (max(1, n).bit_length() - 1)


def pow2_ceil(n: int) -> int:
    """Smallest power of two >= max(n, 1)."""
    return 1 << (max(1, n) - 1).bit_length()


def sizes_upto(top: int, multiple: int = 1) -> list[int]:
    """Allowed sizes up to ``top``: powers of two and 1.5x powers of two that are multiples of
    ``multiple`` (a power of two, e.g. the number of data-parallel devices); ``[multiple]`` if none."""
    step = pow2_ceil(multiple)
    found = {c for k in range(top.bit_length() + 1) for c in (1 << k, 3 << k) if c <= top}
    return sorted(c for c in found if c % step == 0) or [step]


def round_size(n: int, minimum: int = 1, multiple: int = 1) -> int:
    """The smallest allowed size (:func:`sizes_upto`) that is >= max(n, minimum)."""
    n = max(n, minimum, 1)
    return next(c for c in sizes_upto(2 * pow2_ceil(n), multiple) if c >= n)

PROMPT_STEP = 16  # the sampler's prompt widths up to 256 are multiples of this
CACHE_STEP = 64  # its KV-cache lengths are multiples of this (bounds the decode loop's compiled shapes)


def round_up(n: int, step: int) -> int:
    """The smallest multiple of ``step`` that is >= ``n``."""
    return -(-n // step) * step


def prompt_bucket(n: int, minimum: int) -> int:
    """A sampler's padded prompt width: multiples of 16 up to 256, then powers of two and 1.5x powers
    of two up to 512, then multiples of 512: fine steps where short prompts make prefill the cost (a
    debate round's prompts after their shared head; bench/README "validation")."""
    n = max(n, minimum)
    if n <= 256:
        return round_up(n, PROMPT_STEP)
    if n <= 512:
        return round_size(n, minimum)
    return round_up(n, 512)


def _common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    return next((k for k in range(n) if a[k] != b[k]), n)


def group_prefixes(keys: Sequence[Sequence[int]], shareable: Sequence[int], sizes: Sequence[int],
                   max_size: int | None = None, min_prefix: int = 1) -> list[tuple[int, list[int]]]:
    """Groups ``(prefix length, member indices)`` of sequences laid out as one shared prefix followed
    by each member's own tokens.

    ``keys[i][:shareable[i]]`` may be shared; ``sizes[i]`` is what member ``i`` takes alone; a group
    takes ``prefix + sum(sizes[i] - prefix)``, at most ``max_size``. Sequences are sorted so that alike
    ones are adjacent, and one joins the open group when that lays out fewer tokens than starting a new
    one. Groups of one, or with a prefix shorter than ``min_prefix``, get prefix 0.
    """
    order = sorted(range(len(keys)), key=lambda i: tuple(keys[i][:shareable[i]]))
    groups: list[tuple[int, list[int]]] = []
    for i in order:
        if groups:
            prefix, members = groups[-1]
            first = members[0]
            shared = _common_prefix(keys[first], keys[i], min(prefix, shareable[i]))
            cost = prefix + sum(sizes[m] - prefix for m in members)
            joined = shared + sum(sizes[m] - shared for m in members) + sizes[i] - shared
            if shared > 0 and joined < cost + sizes[i] and (max_size is None or joined <= max_size):
                groups[-1] = (shared, members + [i])
                continue
        groups.append((shareable[i], [i]))
    return [(p if len(m) > 1 and p >= min_prefix else 0, m) for p, m in groups]
