"""Per-token log-probabilities (and entropies) of given sequences, without ever materialising the full
``[B, T, V]`` logits: the output head runs over chunks of tokens in a scan whose body is rematerialised,
so neither the forward nor the backward pass holds more than one chunk of logits at a time, unless all
chunks together fit in ``KEEP_LOGITS_BYTES``, when the backward pass reuses them."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from jaxdebate.model.config import LlamaConfig
from jaxdebate.model.kernels import F32
from jaxdebate.model.llama import Params, forward, head_logits

DEFAULT_CHUNK = 1024
# Up to this many bytes of float32 logits (all chunks of one call) are kept for the backward pass
# instead of recomputed: 1 GiB is ~5,400 tokens of a 49,152-token vocabulary.
KEEP_LOGITS_BYTES = 1 << 30


def _chunk_stats(params, config, hidden, targets, temperature, with_entropy):
    """log p(target) and entropy for one chunk of hidden states ``[C, D]`` / targets ``[C]``."""
    scaled = checkpoint_name(head_logits(params, config, hidden) / temperature, "chunk_logits")
    lse = jax.nn.logsumexp(scaled, axis=-1)
    # a one-hot select rather than a gather: its gradient is element-wise (fuses), not a scatter
    hit = jnp.arange(scaled.shape[-1], dtype=jnp.int32)[None, :] == targets[:, None]
    picked = jnp.sum(jnp.where(hit, scaled, 0.0), axis=-1)
    lp = picked - lse
    if not with_entropy:
        return lp, jnp.zeros_like(lp)
    probs = jnp.exp(scaled - lse[:, None])
    return lp, lse - jnp.sum(probs * scaled, axis=-1)


def hidden_logprobs(
    params: Params,
    config: LlamaConfig,
    hidden: jax.Array,
    targets: jax.Array,
    *,
    temperature: float | jax.Array = 1.0,
    with_entropy: bool = False,
    chunk_size: int = DEFAULT_CHUNK,
) -> tuple[jax.Array, jax.Array]:
    """``log_softmax(head(hidden) / temperature)[targets]`` and the entropy, for ``hidden [..., D]`` and
    ``targets [...]``, computed ``chunk_size`` tokens at a time."""
    lead = targets.shape
    d = hidden.shape[-1]
    h = hidden.reshape(-1, d)
    y = targets.reshape(-1).astype(jnp.int32)
    n = y.shape[0]
    chunk = max(1, min(chunk_size, n))
    n_chunks = -(-n // chunk)
    pad = n_chunks * chunk - n
    h = jnp.pad(h, ((0, pad), (0, 0))).reshape(n_chunks, chunk, d)
    y = jnp.pad(y, (0, pad)).reshape(n_chunks, chunk)
    temperature = jnp.asarray(temperature, F32)

    # The backward pass recomputes a chunk's forward; when every chunk's logits fit in
    # KEEP_LOGITS_BYTES they are kept instead, which saves the head's largest matmul once per chunk.
    keep = n_chunks * chunk * config.vocab_size * 4 <= KEEP_LOGITS_BYTES
    policy = jax.checkpoint_policies.save_only_these_names("chunk_logits") if keep else None

    @functools.partial(jax.checkpoint, prevent_cse=False, policy=policy)
    def body(carry, xs):
        hc, yc = xs
        return carry, _chunk_stats(params, config, hc, yc, temperature, with_entropy)

    _, (lp, ent) = jax.lax.scan(body, None, (h, y))
    lp = lp.reshape(-1)[:n].reshape(lead)
    ent = ent.reshape(-1)[:n].reshape(lead)
    return lp, ent


@functools.partial(jax.jit, static_argnames=("config", "with_entropy", "chunk_size"))
def token_logprobs(
    params: Params,
    config: LlamaConfig,
    tokens: jax.Array,
    attention_mask: jax.Array | None = None,
    *,
    temperature: float | jax.Array = 1.0,
    with_entropy: bool = False,
    chunk_size: int = DEFAULT_CHUNK,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """``lp [B, T]`` (float32) with ``lp[:, t] = log p(tokens[:, t] | tokens[:, :t])`` under
    ``logits / temperature``, for ``t >= 1``; 0 at ``t = 0``, on padding and on the first real token of
    a left-padded row (it has no context). With ``with_entropy`` also the entropy ``[B, T]`` of the
    predictive distribution for each of those tokens (same zeros). Differentiable in ``params``."""
    tokens = jnp.asarray(tokens, jnp.int32)
    b, t = tokens.shape
    mask = jnp.ones((b, t), bool) if attention_mask is None else jnp.asarray(attention_mask).astype(bool)
    hidden, _ = forward(params, config, tokens, attention_mask=mask)
    lp, ent = hidden_logprobs(
        params, config, hidden[:, :-1], tokens[:, 1:], temperature=temperature,
        with_entropy=with_entropy, chunk_size=chunk_size,
    )
    valid = mask[:, 1:] & mask[:, :-1]
    zero = jnp.zeros((b, 1), F32)
    lp = jnp.concatenate([zero, jnp.where(valid, lp, 0.0)], axis=1)
    if not with_entropy:
        return lp
    ent = jnp.concatenate([zero, jnp.where(valid, ent, 0.0)], axis=1)
    return lp, ent
