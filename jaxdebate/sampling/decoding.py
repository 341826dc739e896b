"""The in-process sampler's device code, pure functions over arrays: prefill of shared prompt heads,
one sampled token per row, the decode loop, and per-row PRNG keys. :class:`~jaxdebate.sampling.jax_sampler.JaxSampler`
is the host shell that batches, pads, jits and places them."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdebate.model.kernels import F32
from jaxdebate.model.llama import forward, head_logits, init_cache, positions_from_mask

_TOP_P_ITERS = 32


def prefill(params, heads, head_mask, group, tokens, mask, rows, cache_len, *, config):
    """Prefill the distinct prompts and copy their caches to the ``rows [B]`` that sample them.

    Prompt ``k`` is ``heads[group[k]]`` (a prefix shared by its group, left-padded, possibly empty)
    followed by its own tokens ``tokens[k]`` (left-padded); each head is computed once. Returns the
    next-token logits ``[B, V]``, the per-layer cache (``B`` rows, ``cache_len`` slots) and the position
    of each row's next token. The prompts are prefilled in a cache of their own width only and the
    decode slots appended after: attending over empty slots, and carrying them through every layer,
    was most of what a cached prefill cost over an uncached one (bench/README "Where a validation's
    time goes")."""
    cache = init_cache(config, heads.shape[0], heads.shape[1] + tokens.shape[1])
    if heads.shape[1]:
        _, cache = forward(params, config, heads, positions_from_mask(head_mask), head_mask, cache)
    cache = {
        "k": jnp.take(cache["k"], group, axis=1),
        "v": jnp.take(cache["v"], group, axis=1),
        "mask": jnp.take(cache["mask"], group, axis=0),
        "index": cache["index"],
    }
    shared = jnp.take(head_mask.sum(axis=1, dtype=jnp.int32), group)
    positions = shared[:, None] + positions_from_mask(mask)
    h, cache = forward(params, config, tokens, positions, mask, cache)
    logits = head_logits(params, config, h[:, -1])
    take = functools.partial(jnp.take, indices=rows)
    free = cache_len - cache["mask"].shape[1]  # the decode slots, empty
    slots = ((0, 0), (0, 0), (0, 0), (0, free), (0, 0))
    cache = {
        "k": jnp.pad(take(cache["k"], axis=1), slots),
        "v": jnp.pad(take(cache["v"], axis=1), slots),
        "mask": jnp.pad(take(cache["mask"], axis=0), ((0, 0), (0, free))),
        "index": cache["index"],
    }
    return take(logits, axis=0), cache, take(positions[:, -1] + 1, axis=0)


def top_p_keep(probs: jax.Array, top_p: jax.Array) -> jax.Array:
    """The nucleus of each row: tokens with ``p >= tau``, ``tau`` the largest threshold whose kept mass
    reaches ``top_p`` (found by bisection instead of a full sort; ties at ``tau`` are all kept)."""

    def body(_, bounds):
        lo, hi = bounds
        mid = (lo + hi) / 2
        mass = jnp.sum(jnp.where(probs >= mid[:, None], probs, 0.0), axis=-1)
        ok = mass >= top_p
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid)

    lo = jnp.zeros(probs.shape[0], F32)
    lo, _ = jax.lax.fori_loop(0, _TOP_P_ITERS, body, (lo, jnp.max(probs, axis=-1)))
    return (probs >= lo[:, None]) | (top_p[:, None] >= 1.0)


def sample(logits, keys, step, temperature, top_p, use_top_p):
    """One token per row and its log-prob (``log_softmax(logits / T)``; greedy rows: ``T = 1``).

    Few passes over ``[B, V]``: an argmax (the greedy token and the max), one exp, block sums; the
    sampled token is found by a two-level inverse CDF (block, then token within the block)."""
    greedy = temperature <= 0
    scaled = logits / jnp.where(greedy, 1.0, temperature)[:, None]
    best = jnp.argmax(scaled, axis=-1)
    top = jnp.take_along_axis(scaled, best[:, None], axis=-1)
    weights = jnp.exp(scaled - top)  # unnormalised probabilities, max 1
    log_total = jnp.log(jnp.sum(weights, axis=-1))
    if use_top_p:
        weights = jnp.where(top_p_keep(weights / jnp.exp(log_total)[:, None], top_p), weights, 0.0)
    u = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, step), (), F32))(keys)
    rows, v = weights.shape
    block = 256 if v % 256 == 0 else 1
    blocks = weights.reshape(rows, v // block, block)
    outer = jnp.cumsum(blocks.sum(-1), axis=-1)
    target = u * outer[:, -1]
    b = jnp.minimum(jnp.sum(outer <= target[:, None], axis=-1), v // block - 1)
    before = jnp.where(b > 0, jnp.take_along_axis(outer, jnp.maximum(b - 1, 0)[:, None], 1)[:, 0], 0.0)
    inner_weights = jnp.take_along_axis(blocks, b[:, None, None], 1)[:, 0]
    inner = jnp.cumsum(inner_weights, axis=-1)
    i = jnp.sum(inner <= (target - before)[:, None], axis=-1)
    # guard against rounding at a block's end: step back to the last token with weight > 0
    last_nonzero = block - 1 - jnp.argmax(inner_weights[:, ::-1] > 0, axis=-1)
    sampled = b * block + jnp.minimum(i, last_nonzero)
    token = jnp.where(greedy, best, sampled).astype(jnp.int32)
    picked = jnp.take_along_axis(scaled, token[:, None], axis=-1)[:, 0]
    return token, picked - top[:, 0] - log_total


def decode(params, state, until, *, config, stop_ids, use_top_p):
    """Generate tokens ``state["step"] .. until - 1`` (stopping early when every row is done)."""
    stop = jnp.asarray(stop_ids, jnp.int32)
    ones = jnp.ones((state["pos"].shape[0], 1), bool)

    def cond(s):
        return (s["step"] < until) & ~jnp.all(s["done"])

    def body(s):
        token, lp = sample(s["logits"], s["keys"], s["step"], s["temperature"], s["top_p"], use_top_p)
        active = ~s["done"]
        token = jnp.where(active, token, 0)
        length = s["length"] + active
        hit_stop = active & jnp.isin(token, stop)
        h, cache = forward(params, config, token[:, None], s["pos"][:, None], ones, s["cache"])
        return {
            **s,
            "cache": cache,
            "logits": head_logits(params, config, h[:, 0]),
            "pos": s["pos"] + 1,
            "step": s["step"] + 1,
            "tokens": jax.lax.dynamic_update_slice(s["tokens"], token[:, None], (0, s["step"])),
            "logprobs": jax.lax.dynamic_update_slice(s["logprobs"], jnp.where(active, lp, 0.0)[:, None],
                                                     (0, s["step"])),
            "length": length,
            "stopped": s["stopped"] | hit_stop,
            "done": s["done"] | hit_stop | (length >= s["max_new"]),
        }

    return jax.lax.while_loop(cond, body, state)



@jax.jit
def row_keys(ids: jax.Array) -> jax.Array:
    """Per-row PRNG keys from ``[seed, prompt index, sample index]`` rows."""

    def one(row):
        key = jax.random.PRNGKey(row[0])
        return jax.random.fold_in(jax.random.fold_in(key, row[1]), row[2])

    return jax.vmap(one)(ids)
