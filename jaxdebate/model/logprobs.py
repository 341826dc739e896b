"""Per-token log-probabilities (and entropies) of given sequences, without ever materialising the full
``[B, T, V]`` logits: the output head runs over chunks of tokens in a scan, each chunk through a
hand-written VJP, so neither the forward nor the backward pass holds more than one chunk of logits at a
time, unless all chunks together fit in ``KEEP_LOGITS_BYTES``, when the backward pass reuses them."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdebate.model.config import LlamaConfig
from jaxdebate.model.kernels import F32, bf16_rows_contraction
from jaxdebate.model.llama import Params, compute_dtype, forward, head_matmul, head_weights

DEFAULT_CHUNK = 1024
# Up to this many bytes of float32 logits (all chunks of one call) are kept for the backward pass
# instead of recomputed: 1 GiB is ~5,400 tokens of a 49,152-token vocabulary.
KEEP_LOGITS_BYTES = 1 << 30


def _softmax_stats(scaled, targets, with_entropy):
    """log p(target), the log-partition and the mean scaled logit under p, from one exp pass.

    Why not ``logsumexp`` then ``exp(scaled - lse)``: XLA:CPU runs an exp inside a row reduction far
    slower than the reduction itself, so the second pass for the entropy cost as much as the first;
    here both sums share one pass (bench/README "The output head's softmax passes")."""
    top = jnp.max(scaled, axis=-1)
    e = jnp.exp(scaled - top[:, None])
    z = jnp.sum(e, axis=-1)
    lse = top + jnp.log(z)
    mean = jnp.sum(e * scaled, axis=-1) / z if with_entropy else jnp.zeros_like(lse)
    picked = jnp.take_along_axis(scaled, targets[:, None], axis=-1)[:, 0]
    return picked - lse, lse, mean


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def _chunk_stats(weights, hidden, targets, temperature, tied, with_entropy, keep, grad_operands=None):
    """``(log p(target), entropy)`` of one chunk of hidden states ``[C, D]`` under the head's logits
    divided by ``temperature``. ``keep``: the backward pass reuses the forward's logits (else it
    recomputes the chunk's GEMM). ``grad_operands`` (``model.dot_dtype="bfloat16_grads"``): the two
    gradient GEMMs round their operands to that dtype (f32 accumulation); the forward never does."""
    return _chunk_stats_fwd(weights, hidden, targets, temperature, tied, with_entropy, keep, grad_operands)[0]


def _chunk_stats_fwd(weights, hidden, targets, temperature, tied, with_entropy, keep, grad_operands=None):
    scaled = head_matmul(hidden, weights, tied) / temperature
    lp, lse, mean = _softmax_stats(scaled, targets, with_entropy)
    ent = lse - mean if with_entropy else jnp.zeros_like(lp)
    return (lp, ent), (weights, hidden, targets, temperature, lse, mean, scaled if keep else None)


def _chunk_stats_bwd(tied, with_entropy, keep, grad_operands, residuals, cotangents):
    weights, hidden, targets, temperature, lse, mean, scaled = residuals
    g_lp, g_ent = cotangents
    if scaled is None:
        scaled = head_matmul(hidden, weights, tied) / temperature
    # d lp / d s_j = [j = target] - p_j;  d entropy / d s_j = -p_j (s_j - mean): one element-wise pass
    p = jnp.exp(scaled - lse[:, None])
    coef = g_lp[:, None] + g_ent[:, None] * (scaled - mean[:, None]) if with_entropy else g_lp[:, None]
    hit = jnp.arange(scaled.shape[-1], dtype=jnp.int32)[None, :] == targets[:, None]
    d_logits = (jnp.where(hit, g_lp[:, None], 0.0) - p * coef) / temperature
    if grad_operands is None:
        # the GEMMs' own transposes (head_matmul's layouts), on the gradient of the logits
        d_weights, d_hidden = jax.vjp(lambda w, h: head_matmul(h, w, tied), weights, hidden)[1](d_logits)
        return d_weights, d_hidden, None, None
    d, w, h = (x.astype(grad_operands) for x in (d_logits, weights, hidden))
    d_hidden = jnp.einsum("cv,vd->cd" if tied else "cv,dv->cd", d, w, preferred_element_type=F32)
    d_weights = bf16_rows_contraction(d, h) if tied else bf16_rows_contraction(h, d)
    return d_weights.astype(weights.dtype), d_hidden.astype(hidden.dtype), None, None


_chunk_stats.defvjp(_chunk_stats_fwd, _chunk_stats_bwd)


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

    # The backward pass recomputes a chunk's logits; when every chunk's logits fit in
    # KEEP_LOGITS_BYTES they are kept instead, which saves the head's largest matmul once per chunk.
    keep = n_chunks * chunk * config.vocab_size * 4 <= KEEP_LOGITS_BYTES
    dt, tied, weights = compute_dtype(config), config.tie_word_embeddings, head_weights(params, config)
    grad_operands = "bfloat16" if config.dot_dtype == "bfloat16_grads" else None

    def body(carry, xs):
        hc, yc = xs
        return carry, _chunk_stats(weights, hc.astype(dt), yc, temperature, tied, with_entropy, keep, grad_operands)

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
