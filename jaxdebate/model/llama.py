"""A Flax (linen) Llama: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, tied or untied
output head, causal + padding masks and a KV cache.

The public functions take and return a plain nested dict of float32 arrays whose names mirror the HF
modules, with the transformer layers stacked on a leading layer axis and run with a scan over layers::

    {"embed_tokens": {"embedding": [V, D]},
     "layers": {"input_layernorm": {"scale": [L, D]},
                "self_attn": {"q_proj": {"kernel": [L, D, H*hd]}, "k_proj": ..., "v_proj": ...,
                              "o_proj": {"kernel": [L, H*hd, D]}},
                "post_attention_layernorm": {"scale": [L, D]},
                "mlp": {"gate_proj": {"kernel": [L, D, F]}, "up_proj": ..., "down_proj": {"kernel": [L, F, D]}}},
     "norm": {"scale": [D]},
     "lm_head": {"kernel": [D, V]}}          # only when the embeddings are not tied

Kernels are ``[in, out]`` (``y = x @ kernel``). Computation runs in ``config.dtype`` (float32 or
bfloat16) with float32 norms, softmax and log-probs; every matmul accumulates in float32, and the
layers' projections round their operands to bf16 under ``config.dot_dtype`` ``bfloat16`` (both
passes) or ``bfloat16_grads`` (the gradient contractions only, the output head's included).
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxdebate.model.config import LlamaConfig
from jaxdebate.model.kernels import F32, attend, attend_one, causal_blocks, matmul

Params = dict[str, Any]
Cache = dict[str, jax.Array]


def compute_dtype(config: LlamaConfig) -> jnp.dtype:
    return jnp.dtype(jnp.bfloat16) if config.dtype == "bfloat16" else jnp.dtype(F32)


# ------------------------------------------------------------------------------------------ rotary


def rope_inv_freq(config: LlamaConfig) -> np.ndarray:
    """Inverse rotary frequencies ``[head_dim // 2]`` in float32 (HF's "default"/"linear"/"llama3")."""
    hd = config.head_dim
    exponent = np.arange(0, hd, 2, dtype=np.int64).astype(np.float32) / np.float32(hd)
    inv = (np.float32(1.0) / (np.float32(config.rope_theta) ** exponent)).astype(np.float32)
    if config.rope_type == "linear":
        inv = (inv / np.float32(config.rope_factor)).astype(np.float32)
    elif config.rope_type == "llama3":
        factor = np.float32(config.rope_factor)
        low, high = np.float32(config.rope_low_freq_factor), np.float32(config.rope_high_freq_factor)
        old_len = np.float32(config.rope_original_max_position)
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = np.float32(2 * np.pi) / inv
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv = np.where(medium, smoothed, scaled).astype(np.float32)
    return inv


def rope_tables(config: LlamaConfig, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """cos and sin ``[B, T, head_dim // 2]`` (float32) for integer positions ``[B, T]``."""
    angles = positions.astype(F32)[..., None] * jnp.asarray(rope_inv_freq(config))
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate ``x [B, N, T, hd]`` HF-style (first half / second half pairs); cos, sin ``[B, T, hd/2]``."""
    cos = cos[:, None].astype(x.dtype)
    sin = sin[:, None].astype(x.dtype)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


# ------------------------------------------------------------------------------------------ modules

_normal = nn.initializers.normal(stddev=0.02)


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, scaled in the compute dtype."""

    eps: float
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), F32)
        xf = x.astype(F32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return scale.astype(self.dtype) * xf.astype(self.dtype)


class Embedding(nn.Module):
    """Token embedding table ``[V, D]`` (looked up, then cast to the compute dtype)."""

    vocab_size: int
    features: int
    dtype: Any

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        table = self.param("embedding", _normal, (self.vocab_size, self.features), F32)
        return jnp.take(table, tokens, axis=0).astype(self.dtype)


def _dense_dot(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, operands=None,
               grad_operands=None):
    """``nn.Dense``'s contraction (last axis of ``lhs`` with the kernel's first) through :func:`matmul`."""
    (lhs_c, rhs_c), batch = dimension_numbers
    if tuple(lhs_c) != (lhs.ndim - 1,) or tuple(rhs_c) != (0,) or any(batch):
        raise ValueError(f"_dense_dot handles x[..., in] @ kernel[in, out] only, got {dimension_numbers}")
    return matmul(lhs, rhs, operands, grad_operands)


# one dot_general per LlamaConfig.dot_dtype
_DENSE_DOTS = {"compute": _dense_dot, "bfloat16": functools.partial(_dense_dot, operands="bfloat16"),
               "bfloat16_grads": functools.partial(_dense_dot, grad_operands="bfloat16")}


def _dense(features: int, dtype: Any, name: str, dot_dtype: str = "compute") -> nn.Dense:
    return nn.Dense(features, use_bias=False, dtype=dtype, param_dtype=F32, kernel_init=_normal, name=name,
                    dot_general=_DENSE_DOTS[dot_dtype])


class Attention(nn.Module):
    """Grouped-query self-attention with rotary embeddings and an optional KV cache.

    The cache holds every layer: ``k``/``v`` ``[L, B, KV, S, hd]``; this layer writes its new keys and
    values at slot ``cache_index`` of layer ``layer`` and attends over all ``S`` slots under ``mask``.
    """

    config: LlamaConfig

    @nn.compact
    def __call__(self, x, cos, sin, mask, layer, cache, cache_index):
        cfg = self.config
        dt = compute_dtype(cfg)
        b, t, _ = x.shape
        h, kv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        g = h // kv
        q = _dense(h * hd, dt, "q_proj", cfg.dot_dtype)(x).reshape(b, t, kv, g, hd).transpose(0, 2, 3, 1, 4)
        k = _dense(kv * hd, dt, "k_proj", cfg.dot_dtype)(x).reshape(b, t, kv, hd).transpose(0, 2, 1, 3)
        v = _dense(kv * hd, dt, "v_proj", cfg.dot_dtype)(x).reshape(b, t, kv, hd).transpose(0, 2, 1, 3)
        q = apply_rope(q.reshape(b, kv * g, t, hd), cos, sin).reshape(b, kv, g, t, hd)
        k = apply_rope(k, cos, sin)
        q = q * jnp.asarray(hd**-0.5, dt)
        if cache is not None:
            start = (layer, 0, 0, cache_index, 0)
            ck = jax.lax.dynamic_update_slice(cache["k"], k[None].astype(cache["k"].dtype), start)
            cv = jax.lax.dynamic_update_slice(cache["v"], v[None].astype(cache["v"].dtype), start)
            cache = {**cache, "k": ck, "v": cv}
            k = jax.lax.dynamic_index_in_dim(ck, layer, 0, keepdims=False).astype(dt)
            v = jax.lax.dynamic_index_in_dim(cv, layer, 0, keepdims=False).astype(dt)
        if t == 1:
            out = attend_one(q, k, v, mask)
        else:
            out = attend(q, k, v, mask, causal_blocks(t, k.shape[2], cache is not None)).transpose(0, 3, 1, 2, 4)
        return _dense(cfg.hidden_size, dt, "o_proj", cfg.dot_dtype)(out.astype(dt).reshape(b, t, h * hd)), cache


class MLP(nn.Module):
    """SwiGLU feed-forward block: ``down(silu(gate(x)) * up(x))``."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, x):
        dt, dots = compute_dtype(self.config), self.config.dot_dtype
        f = self.config.intermediate_size
        # on token rows [N, d]: XLA:CPU runs the block with bf16 operands (model.dot_dtype) ~1.3x faster
        # than on [B, T, d]; float32 gives the same bits either way (bench/README "train_step")
        rows = x.reshape(-1, x.shape[-1])
        gate = _dense(f, dt, "gate_proj", dots)(rows)
        up = _dense(f, dt, "up_proj", dots)(rows)
        out = _dense(self.config.hidden_size, dt, "down_proj", dots)(jax.nn.silu(gate) * up)
        return out.reshape(x.shape[:-1] + (self.config.hidden_size,))


class DecoderLayer(nn.Module):
    """One pre-norm transformer block; ``carry`` is ``(hidden, cache)``, scanned over layers."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, carry, layer, cos, sin, mask, cache_index):
        cfg = self.config
        dt = compute_dtype(cfg)
        x, cache = carry
        a, cache = Attention(cfg, name="self_attn")(
            RMSNorm(cfg.rms_norm_eps, dt, name="input_layernorm")(x), cos, sin, mask, layer, cache,
            cache_index,
        )
        x = x + a
        x = x + MLP(cfg, name="mlp")(RMSNorm(cfg.rms_norm_eps, dt, name="post_attention_layernorm")(x))
        return (x, cache), None


def _remat_policy(config: LlamaConfig):
    if config.remat == "dots":
        return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    return None


class Llama(nn.Module):
    """The decoder stack; ``__call__`` returns final-normed hidden states and the updated cache."""

    config: LlamaConfig

    def setup(self) -> None:
        cfg = self.config
        dt = compute_dtype(cfg)
        layer_cls = DecoderLayer
        if cfg.remat != "none":
            layer_cls = nn.remat(DecoderLayer, prevent_cse=False, policy=_remat_policy(cfg))
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, dt)
        self.layers = nn.scan(
            layer_cls,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
            length=cfg.num_layers,
        )(cfg)
        self.norm = RMSNorm(cfg.rms_norm_eps, dt)
        if not cfg.tie_word_embeddings:
            self.lm_head = _dense(cfg.vocab_size, dt, "lm_head")

    def __call__(self, tokens, positions, mask, cache=None, cache_index=0):
        cos, sin = rope_tables(self.config, positions)
        x = self.embed_tokens(tokens)
        layer_ids = jnp.arange(self.config.num_layers, dtype=jnp.int32)
        (x, cache), _ = self.layers((x, cache), layer_ids, cos, sin, mask, cache_index)
        return self.norm(x), cache

    def init_all(self, tokens):
        """Touch every parameter (used by ``init``)."""
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        mask = jnp.ones(tokens.shape + (tokens.shape[1],), bool)
        h, _ = self(tokens, positions, mask)
        if not self.config.tie_word_embeddings:
            h = self.lm_head(h)
        return h


# ------------------------------------------------------------------------------------------ functions


def init_params(config: LlamaConfig, seed: int | jax.Array = 0) -> Params:
    """Random parameters (normal, std 0.02; norms 1) in the layout described in the module docstring."""
    key = jax.random.PRNGKey(seed) if isinstance(seed, int) else seed
    return _init(config, key)


@functools.partial(jax.jit, static_argnums=0)
def _init(config: LlamaConfig, key: jax.Array) -> Params:
    tokens = jnp.zeros((1, 1), jnp.int32)
    return dict(Llama(config).init(key, tokens, method=Llama.init_all)["params"])


def param_shapes(config: LlamaConfig) -> Params:
    """The expected parameter tree as ``jax.ShapeDtypeStruct`` leaves (no compute)."""
    tokens = jax.ShapeDtypeStruct((1, 1), jnp.int32)
    variables = jax.eval_shape(
        functools.partial(Llama(config).init, method=Llama.init_all), jax.random.PRNGKey(0), tokens
    )
    return dict(variables["params"])


def positions_from_mask(attention_mask: jax.Array) -> jax.Array:
    """Positions ``[B, T]`` counting only real tokens, so left padding does not shift them."""
    mask = attention_mask.astype(jnp.int32)
    return jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0)


def init_cache(config: LlamaConfig, batch: int, max_len: int, dtype: Any = None) -> Cache:
    """An empty KV cache for ``batch`` rows of up to ``max_len`` tokens (prompt + generation).

    ``k``/``v`` ``[L, B, KV, S, hd]`` in ``dtype`` (default: the compute dtype), ``mask`` ``[B, S]`` marks
    filled key slots, ``index`` is the next slot to write.
    """
    dtype = compute_dtype(config) if dtype is None else jnp.dtype(dtype)
    shape = (config.num_layers, batch, config.num_kv_heads, max_len, config.head_dim)
    return {
        "k": jnp.zeros(shape, dtype),
        "v": jnp.zeros(shape, dtype),
        "mask": jnp.zeros((batch, max_len), bool),
        "index": jnp.zeros((), jnp.int32),
    }


def forward(
    params: Params,
    config: LlamaConfig,
    tokens: jax.Array,
    positions: jax.Array | None = None,
    attention_mask: jax.Array | None = None,
    cache: Cache | None = None,
    segment_ids: jax.Array | None = None,
    prefix_ids: jax.Array | None = None,
) -> tuple[jax.Array, Cache | None]:
    """Final-normed hidden states ``[B, T, D]`` (compute dtype) and the updated cache.

    ``attention_mask [B, T]`` is True on real tokens (default all); ``positions`` default to
    :func:`positions_from_mask`. Without a cache, attention is causal over the given tokens. With a
    cache, the tokens are written at slots ``cache["index"] ...`` and attend causally to every filled
    slot; the returned cache has ``index`` advanced by ``T``. Without a cache the second value is None.

    Packed rows (no cache) pass ``segment_ids [B, T]`` (0 = padding) and optionally ``prefix_ids``:
    a token attends causally to earlier tokens of its own segment and of segment ``prefix_ids``
    (a prompt prefix shared by several sequences, :mod:`jaxdebate.rl.batching`); ``positions`` are
    then required.
    """
    tokens = jnp.asarray(tokens, jnp.int32)
    b, t = tokens.shape
    model = Llama(config)
    if segment_ids is not None:
        if cache is not None or positions is None:
            raise ValueError("segment_ids need explicit positions and no cache")
        seg = jnp.asarray(segment_ids, jnp.int32)
        pre = seg if prefix_ids is None else jnp.asarray(prefix_ids, jnp.int32)
        causal = jnp.tril(jnp.ones((t, t), bool))
        visible = (seg[:, None, :] == seg[:, :, None]) | (seg[:, None, :] == pre[:, :, None])
        mask = causal[None] & visible & (seg[:, None, :] > 0)
        return model.apply({"params": params}, tokens, jnp.asarray(positions, jnp.int32), mask)
    if attention_mask is None:
        attention_mask = jnp.ones((b, t), bool)
    attention_mask = jnp.asarray(attention_mask).astype(bool)
    if positions is None:
        positions = positions_from_mask(attention_mask)
    if cache is None:
        causal = jnp.tril(jnp.ones((t, t), bool))
        mask = causal[None] & attention_mask[:, None, :]
        return model.apply({"params": params}, tokens, positions, mask)
    index = cache["index"]
    key_mask = jax.lax.dynamic_update_slice(cache["mask"], attention_mask, (0, index))
    slots = jnp.arange(key_mask.shape[1])
    causal = slots[None, :] <= (index + jnp.arange(t))[:, None]
    mask = causal[None] & key_mask[:, None, :]
    layer_cache = {"k": cache["k"], "v": cache["v"]}
    h, layer_cache = model.apply({"params": params}, tokens, positions, mask, layer_cache, index)
    return h, {**layer_cache, "mask": key_mask, "index": index + t}


def head_weights(params: Params, config: LlamaConfig) -> jax.Array:
    """The output head's matrix in the compute dtype: the tied embedding ``[V, D]`` or ``lm_head`` ``[D, V]``."""
    tied = config.tie_word_embeddings
    return (params["embed_tokens"]["embedding"] if tied else params["lm_head"]["kernel"]).astype(compute_dtype(config))


def head_matmul(hidden: jax.Array, weights: jax.Array, tied: bool) -> jax.Array:
    """Float32 logits ``[..., V]`` of ``hidden [..., D]`` under :func:`head_weights` (``tied``: ``[V, D]``)."""
    return jnp.einsum("...d,vd->...v" if tied else "...d,dv->...v", hidden, weights, preferred_element_type=F32)


def head_logits(params: Params, config: LlamaConfig, hidden: jax.Array) -> jax.Array:
    """Float32 logits ``[..., V]`` of hidden states ``[..., D]`` (tied embedding or ``lm_head``)."""
    return head_matmul(hidden.astype(compute_dtype(config)), head_weights(params, config), config.tie_word_embeddings)


@functools.partial(jax.jit, static_argnames=("config",))
def logits(
    params: Params, config: LlamaConfig, token_ids: jax.Array, attention_mask: jax.Array | None = None
) -> jax.Array:
    """Float32 logits ``[B, T, V]`` of every position (padding positions hold meaningless values)."""
    h, _ = forward(params, config, token_ids, attention_mask=attention_mask)
    return head_logits(params, config, h)
