"""The Llama's array kernels with hand-written VJPs, which XLA:CPU runs faster than the ones autodiff
derives: the layers' matmul (f32 accumulation, optional bf16 operands in both passes or in the
backward only) and softmax attention (query blocks that skip the keys a causal mask hides; one-token
decoding). :mod:`jaxdebate.model.llama` wires them into its Flax modules."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

F32 = jnp.float32


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def matmul(x: jax.Array, kernel: jax.Array, operands: str | None = None, grad_operands: str | None = None) -> jax.Array:
    """``x [..., in] @ kernel [in, out]``, accumulated in float32 and rounded once to ``x``'s dtype.

    Why not a plain dot: XLA:CPU runs bf16 x bf16 -> f32 on its fast path (faster than a bf16-out
    dot), and lowers the weight gradient that autodiff derives (a dot contracting the token axis of a
    transposed, fused operand) to a slow generic dot: this VJP writes both gradients as plain
    contractions (figures: bench/README "train_step after the matmul VJP"). GPUs accumulate in f32
    either way. ``operands`` (``model.dot_dtype="bfloat16"``) rounds both operands of the forward and
    of both gradient contractions to that dtype; ``grad_operands`` (``model.dot_dtype="bfloat16_grads"``)
    rounds those of the two gradient contractions only, so the value (and every log-prob computed from
    it) is the unrounded product's. The results keep ``x``'s dtype.
    """
    x_op, kernel_op = _operands(x, kernel, operands)
    return jnp.einsum("...i,io->...o", x_op, kernel_op, preferred_element_type=F32).astype(x.dtype)


def _operands(x, kernel, operands):
    if operands is None:
        return x, kernel
    if kernel.dtype != x.dtype:  # nn.Dense promotes both to the compute dtype; the VJP relies on it
        raise ValueError(f"matmul with operands={operands}: x is {x.dtype} but the kernel {kernel.dtype}")
    return x.astype(operands), kernel.astype(operands)


def _matmul_fwd(x, kernel, operands, grad_operands):
    # with ``operands`` or ``grad_operands`` the residuals are the rounded copies (half the activation
    # memory in bf16): the gradient contractions read nothing else
    x_op, kernel_op = _operands(x, kernel, operands or grad_operands)
    return matmul(x, kernel, operands, grad_operands), (_stash(x_op), _stash(kernel_op))


def _stash(a: jax.Array) -> jax.Array:
    """A bf16 residual as its uint16 bits (others as they are). Why: XLA:CPU runs bf16 element-wise
    ops in f32, and for the layer scan's stacked residuals it hoisted that convert out of the backward
    loop, so every stack was widened to f32 after the forward and narrowed again layer by layer
    (bench/README "bf16 residuals as their bits"); integer stacks it leaves alone."""
    return jax.lax.bitcast_convert_type(a, jnp.uint16) if a.dtype == jnp.bfloat16 else a


def _unstash(a: jax.Array) -> jax.Array:
    return jax.lax.bitcast_convert_type(a, jnp.bfloat16) if a.dtype == jnp.uint16 else a


def _matmul_bwd(operands, grad_operands, residuals, g):
    x, kernel = (_unstash(r) for r in residuals)
    rounded = operands or grad_operands
    # unrounded, the residuals carry the gradients' dtypes; rounded, they are the rounded copies, and
    # g's dtype is both: the output was cast to x's dtype, and _operands refused a kernel of another
    # dtype than x's
    dx_dtype, dk_dtype = (x.dtype, kernel.dtype) if rounded is None else (g.dtype, g.dtype)
    g = g if rounded is None else g.astype(rounded)
    dx = jnp.einsum("...o,io->...i", g, kernel, preferred_element_type=F32).astype(dx_dtype)
    rows_x, rows_g = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    if rows_x.dtype == F32:
        dk = jnp.einsum("ni,no->io", rows_x, rows_g, preferred_element_type=F32)
    else:
        dk = bf16_rows_contraction(rows_x, rows_g)
    return dx, dk.astype(dk_dtype)


def bf16_rows_contraction(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a [N, i]^T @ b [N, o]`` in float32 for bf16 operands (a weight gradient): the same contraction
    over a unit axis as well, which XLA:CPU lowers to its fast bf16 GEMM instead of a ~4x slower one
    (float32 keeps the plain form: this one is no faster there and gives other bits)."""
    return jnp.einsum("cni,cno->io", a[None], b[None], preferred_element_type=F32)


matmul.defvjp(_matmul_fwd, _matmul_bwd)


# query block sizes tried in order; the first that divides T in at least 2 blocks is used (T is a
# power-of-two bucket in the learner)
ATTENTION_BLOCKS = (128,)


def causal_blocks(t: int, s: int, cached: bool) -> int:
    """How many query blocks :func:`attend` splits ``t`` queries into: block ``i`` sees only the
    first ``(i + 1) * t / blocks`` keys, which is exact when no query attends to a later position
    (always so without a cache: every mask :func:`jaxdebate.model.llama.forward` builds is causal).
    1 = no split."""
    if cached or t != s:
        return 1
    for size in ATTENTION_BLOCKS:
        if t % size == 0 and t >= 2 * size:
            return t // size
    return 1


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def attend(q, k, v, mask, blocks: int = 1):
    """Softmax attention: ``q [B, KV, G, T, hd]`` over ``k``/``v [B, KV, S, hd]`` under ``mask
    [B, T, S]``, scores in float32; returns ``[B, KV, G, T, hd]`` (float32).

    ``blocks > 1`` (:func:`causal_blocks`): the queries are split into that many blocks and block
    ``i`` attends to the first ``(i + 1) * T / blocks`` keys only, skipping the key blocks a causal
    mask hides (3/8 of the scores at 4 blocks). The VJP is written out (the softmax's probabilities
    are its residual, as autodiff's would be): XLA:CPU runs it faster than the derived VJP (bench/README
    "train_step"). A query with no visible key (padding) gets an arbitrary finite output."""
    return _attend_fwd(q, k, v, mask, blocks)[0]


def _query_blocks(t: int, s: int, blocks: int):
    """``(query slice, visible key count)`` of each block (one block: all ``t`` queries, all ``s`` keys)."""
    if blocks == 1:
        return [(slice(0, t), s)]
    size = t // blocks
    return [(slice(i * size, (i + 1) * size), (i + 1) * size) for i in range(blocks)]


def _attend_probs(q, k, mask):
    scores = jnp.einsum("bkgtd,bksd->bkgts", q, k, preferred_element_type=F32)
    return jax.nn.softmax(jnp.where(mask[:, None, None], scores, jnp.finfo(F32).min), axis=-1)


def _attend_fwd(q, k, v, mask, blocks=1):
    probs, outs = [], []
    for rows, n in _query_blocks(q.shape[3], k.shape[2], blocks):
        p = _attend_probs(q[:, :, :, rows], k[:, :, :n], mask[:, rows, :n])
        outs.append(jnp.einsum("bkgts,bksd->bkgtd", p.astype(v.dtype), v[:, :, :n], preferred_element_type=F32))
        probs.append(p)
    out = outs[0] if blocks == 1 else jnp.concatenate(outs, axis=3)
    return out, (q, k, v, tuple(probs))


def _attend_bwd(blocks, residuals, d_out):
    q, k, v, probs = residuals
    d_q, d_k, d_v = [], jnp.zeros(k.shape, F32), jnp.zeros(v.shape, F32)
    for (rows, n), p in zip(_query_blocks(q.shape[3], k.shape[2], blocks), probs):
        g = d_out[:, :, :, rows]
        d_v = d_v.at[:, :, :n].add(jnp.einsum("bkgts,bkgtd->bksd", p, g, preferred_element_type=F32))
        d_probs = jnp.einsum("bkgtd,bksd->bkgts", g, v[:, :, :n], preferred_element_type=F32)
        # no mask pass: a masked key's p is exactly 0 (its score was float32's minimum), so is its d_scores;
        # a query with no visible key gets no gradient from the loss (d_out = 0), hence d_scores = 0
        d_scores = p * (d_probs - jnp.sum(d_probs * p, axis=-1, keepdims=True))
        d_q.append(jnp.einsum("bkgts,bksd->bkgtd", d_scores, k[:, :, :n], preferred_element_type=F32))
        d_k = d_k.at[:, :, :n].add(jnp.einsum("bkgts,bkgtd->bksd", d_scores, q[:, :, :, rows],
                                              preferred_element_type=F32))
    d_q = d_q[0] if blocks == 1 else jnp.concatenate(d_q, axis=3)
    return d_q.astype(q.dtype), d_k.astype(k.dtype), d_v.astype(v.dtype), None


attend.defvjp(_attend_fwd, _attend_bwd)


def attend_one(q, k, v, mask):
    """:func:`attend` for one query token (decoding). Contracting the cache with the slot axis
    before the query group is faster on XLA:CPU than the general form (bench/README)."""
    scores = jnp.einsum("bksd,bkgd->bksg", k, q[:, :, :, 0], preferred_element_type=F32)
    scores = jnp.where(mask[:, 0, None, :, None], scores, jnp.finfo(F32).min)
    probs = jax.nn.softmax(scores, axis=2).astype(v.dtype)
    return jnp.einsum("bksg,bksd->bkgd", probs, v, preferred_element_type=F32)[:, None]
