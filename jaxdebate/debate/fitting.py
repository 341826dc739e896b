"""Fit a debate prompt into the token budget by trimming the previous answers it quotes.

Long previous answers are cut to a common cap (water-filling: the longest are cut first), keeping
their tails — where the final answer is — behind a visible marker such as ``[… 312 tokens trimmed …]``.
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxdebate.data.items import Item
from jaxdebate.debate.envs import DebateEnv
from jaxdebate.errors import DataError


class PromptTooLongError(DataError):
    """An item's prompt does not fit the budget even with the quoted answers trimmed away."""


def water_level(lengths: Sequence[int], cut: int) -> int:
    """The largest cap ``c >= 0`` with ``sum(max(0, L - c)) >= cut`` (0 when even that is short)."""
    lo, hi = 0, max(lengths, default=0)
    if sum(max(0, n - hi) for n in lengths) >= cut:
        return hi
    while lo < hi:  # invariant: f(lo) >= cut or lo == 0; f(hi) < cut
        mid = (lo + hi + 1) // 2
        if sum(max(0, n - mid) for n in lengths) >= cut:
            lo = mid
        else:
            hi = mid - 1
    return lo


def trim_text(tokenizer, ids: Sequence[int], cap: int, marker: str) -> str:
    """``ids`` decoded, keeping the last ``cap`` tokens behind the marker."""
    cut = len(ids) - cap
    tail = tokenizer.decode(list(ids[cut:])) if cap > 0 else ""
    return f"{marker.format(n=cut)}\n{tail}" if tail else marker.format(n=cut)


def debate_prompt(
    env: DebateEnv,
    item: Item,
    tokenizer,
    own_previous: str | None,
    others: Sequence[tuple[int, str]],
    budget: int,
) -> tuple[list[int], int]:
    """Token ids of a later-round prompt within ``budget`` tokens, and how many quoted answers were trimmed."""
    show_own = env.config.show_own_previous and own_previous is not None
    texts = ([own_previous] if show_own else []) + [t for _, t in others]
    agents = [j for j, _ in others]

    def render(ts: list[str]) -> list[int]:
        own = ts[0] if show_own else None
        quoted = ts[1:] if show_own else ts
        return tokenizer.encode_chat(env.debate_messages(item, own, list(zip(agents, quoted))))

    ids = render(texts)
    if len(ids) <= budget:
        return ids, 0
    tokens = [tokenizer.encode(t) for t in texts]
    lengths = [len(t) for t in tokens]
    cut = len(ids) - budget
    for _ in range(32):
        cap = water_level(lengths, cut)
        trimmed = [
            trim_text(tokenizer, tok, cap, env.config.trim_marker) if len(tok) > cap else text
            for tok, text in zip(tokens, texts)
        ]
        ids = render(trimmed)
        if len(ids) <= budget:
            return ids, sum(len(tok) > cap for tok in tokens)
        if cap == 0:
            break
        cut += len(ids) - budget
    raise PromptTooLongError(
        f"item {item.id!r}: the later-round prompt needs {len(ids)} tokens even with the other agents' "
        f"answers trimmed away, over the budget of {budget} (max_sequence_length minus max_tokens)"
    )


def first_prompt_lengths(
    envs: Sequence[DebateEnv], items: Sequence[Item], tokenizer, budget: int
) -> list[tuple[int, bool] | None]:
    """Per item, ``(tokens, exact)`` for a round-1 prompt over ``budget``, else None.

    Linear in the text and cheap for the common case: a byte-level tokenizer emits at most one token
    per UTF-8 byte (plus one), so short prompts are not tokenised; a huge prompt is judged from a
    prefix cut at whitespace (a lower bound of the whole prompt's count, so ``exact`` is False).
    """
    probe_chars = 64 * budget + 4096
    out: list[tuple[int, bool] | None] = []
    for env, item in zip(envs, items):
        text = tokenizer.chat_text(env.first_messages(item))
        if len(text.encode("utf-8")) + 1 <= budget:
            out.append(None)
            continue
        cut = -1
        if len(text) > probe_chars:  # cut at whitespace, else anywhere: never tokenise megabytes
            cut = text.rfind(" ", 0, probe_chars)
            cut = cut if cut > budget else probe_chars
        if cut > budget:
            n = len(tokenizer.encode(text[:cut]))
            if n > budget:
                out.append((n, False))
                continue
        n = len(tokenizer.encode(text))
        out.append((n, True) if n > budget else None)
    return out


def check_first_prompts(
    envs: Sequence[DebateEnv], items: Sequence[Item], tokenizer, budget: int, *, show: int = 10
) -> None:
    """PromptTooLongError listing the items (file:line where known) whose round-1 prompt is over
    ``budget``; run before training, so a bad item is reported up front, not at the step that draws it."""
    lengths = first_prompt_lengths(envs, items, tokenizer, budget)
    bad = [(item, n) for item, n in zip(items, lengths) if n is not None]
    if not bad:
        return
    lines = [f"  {item.where}: {'' if exact else 'at least '}{n} tokens" for item, (n, exact) in bad[:show]]
    if len(bad) > show:
        lines.append(f"  ... and {len(bad) - show} more")
    raise PromptTooLongError(
        f"{len(bad)} item(s) have a round-1 prompt over the budget of {budget} tokens "
        f"(debate.max_sequence_length minus sampler.max_new_tokens); drop them or raise "
        f"debate.max_sequence_length:\n" + "\n".join(lines)
    )


def first_prompt(env: DebateEnv, item: Item, tokenizer, budget: int) -> list[int]:
    """Token ids of the round-1 prompt; PromptTooLongError when the problem alone is over budget."""
    ids = tokenizer.encode_chat(env.first_messages(item))
    if len(ids) > budget:
        raise PromptTooLongError(
            f"{item.where}: the round-1 prompt has {len(ids)} tokens, over the budget of {budget} "
            f"(debate.max_sequence_length minus the sampler's max_tokens); raise max_sequence_length, "
            f"lower max_tokens, or drop the item"
        )
    return ids
