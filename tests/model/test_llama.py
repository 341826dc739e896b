"""The Flax Llama against PyTorch transformers, and the properties of logits / token_logprobs / cache."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.errors import ConfigError
from jaxdebate.model import (
    LlamaConfig,
    forward,
    head_logits,
    hidden_logprobs,
    init_cache,
    load,
    logits,
    positions_from_mask,
    token_logprobs,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _torch_llama(directory, *, tie: bool, rope_scaling=None, vocab=512):
    """A random transformers LlamaForCausalLM (GQA, larger init so logits are far from uniform)."""
    hf_config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=2, head_dim=16, rope_theta=5000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=tie, max_position_embeddings=256,
        initializer_range=0.1, rope_scaling=rope_scaling,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(hf_config).eval()
    with torch.no_grad():  # make the norms non-trivial too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(directory)
    return model


def _left_padded(rng, vocab, lengths, width):
    ids = np.zeros((len(lengths), width), np.int32)
    mask = np.zeros((len(lengths), width), bool)
    for i, n in enumerate(lengths):
        ids[i, width - n:] = rng.randint(0, vocab, n)
        mask[i, width - n:] = True
    return ids, mask


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}


@pytest.mark.parametrize("tie,rope", [(True, None), (False, LLAMA3_ROPE)], ids=["tied", "untied-llama3"])
def test_logits_match_transformers(tmp, tie, rope):
    ref_model = _torch_llama(tmp, tie=tie, rope_scaling=rope)
    params, config = load(str(tmp))
    assert config.tie_word_embeddings == tie
    assert config.rope_type == ("llama3" if rope else "default")
    ids, mask = _left_padded(np.random.RandomState(0), 512, [40, 23, 1], 40)
    positions = np.asarray(positions_from_mask(mask))
    with torch.no_grad():
        ref = ref_model(
            input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask, dtype=torch.long),
            position_ids=torch.tensor(positions, dtype=torch.long),
        ).logits.numpy()
    ours = np.asarray(logits(params, config, ids, mask))
    assert ours.dtype == np.float32 and ours.shape == (3, 40, 512)
    assert np.abs(ref).max() > 1.0  # a meaningful comparison, not two near-zero tensors
    diff = np.abs(ours - ref)[mask]
    assert diff.max() < 1e-4, diff.max()


def test_bf16_compute_runs_and_tracks_fp32(tiny_model):
    params, config = tiny_model
    ids = np.random.RandomState(1).randint(0, config.vocab_size, (2, 24))
    full = np.asarray(logits(params, config, ids))
    bf16 = dataclasses.replace(config, dtype="bfloat16")
    half = np.asarray(logits(params, bf16, ids))
    assert half.dtype == np.float32 and np.isfinite(half).all()
    assert np.abs(half - full).max() < 0.05 * np.abs(full).max()
    lp = token_logprobs(params, bf16, ids, np.ones_like(ids, bool))
    assert np.isfinite(np.asarray(lp)).all()


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("bfloat16", 2e-2)])
def test_dense_matmul_vjp_equals_autodiff_of_the_plain_contraction(dtype, tol):
    """The layers' matmul has a hand-written VJP (XLA:CPU's fast dot path); its value and both
    gradients equal autodiff of the plain float32-accumulated contraction."""
    from jaxdebate.model.kernels import matmul

    kx, kw, kg = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (2, 7, 24), jnp.float32).astype(dtype)
    w = jax.random.normal(kw, (24, 40), jnp.float32).astype(dtype)
    cot = jax.random.normal(kg, (2, 7, 40), jnp.float32).astype(dtype)

    def plain(x, w):
        return jax.lax.dot_general(x, w, (((2,), (0,)), ((), ())), preferred_element_type=jnp.float32).astype(x.dtype)

    (out, vjp), (ref, ref_vjp) = jax.vjp(matmul, x, w), jax.vjp(plain, x, w)
    for a, b in [(out, ref), *zip(vjp(cot), ref_vjp(cot))]:
        assert a.dtype == b.dtype == jnp.dtype(dtype)
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=tol, atol=tol)
    grads = jax.grad(lambda w: jnp.sum(matmul(x, w).astype(jnp.float32) ** 2))(w)
    assert grads.shape == w.shape and bool(jnp.all(jnp.isfinite(grads.astype(jnp.float32))))


def test_bf16_operand_matmul_rounds_the_operands_of_the_forward_and_both_gradients():
    """``operands="bfloat16"`` (``model.dot_dtype``): the value and both gradients are the float32-accumulated
    contractions of the bf16-rounded operands (cotangent included), returned in float32."""
    from jaxdebate.model.kernels import matmul

    kx, kw, kg = jax.random.split(jax.random.key(1), 3)
    x = jax.random.normal(kx, (2, 7, 24), jnp.float32)
    w = jax.random.normal(kw, (24, 40), jnp.float32)
    cot = jax.random.normal(kg, (2, 7, 40), jnp.float32)
    r = lambda a: np.asarray(a.astype(jnp.bfloat16), np.float64)  # noqa: E731
    out, vjp = jax.vjp(lambda x, w: matmul(x, w, "bfloat16"), x, w)
    dx, dw = vjp(cot)
    assert out.dtype == dx.dtype == dw.dtype == jnp.float32
    np.testing.assert_allclose(out, np.einsum("bti,io->bto", r(x), r(w)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, np.einsum("bto,io->bti", r(cot), r(w)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw, np.einsum("bti,bto->io", r(x), r(cot)), rtol=1e-5, atol=1e-5)
    assert np.abs(np.asarray(out) - np.asarray(matmul(x, w))).max() > 1e-3  # the rounding really happened
    with pytest.raises(ValueError, match="operands=bfloat16"):
        matmul(x, w.astype(jnp.bfloat16), "bfloat16")


def _logprobs_and_gradient(params, config, ids):
    """Token log-probs of ``ids`` under ``config`` and the gradient of their sum, flattened (float64)."""
    mask = np.ones_like(ids, bool)
    grad = jax.grad(lambda p: jnp.sum(token_logprobs(p, config, ids, mask)))(params)
    return (np.asarray(token_logprobs(params, config, ids, mask)),
            np.concatenate([np.ravel(a) for a in jax.tree.leaves(grad)]).astype(np.float64))


def _cosine(a, b):
    return a @ b / np.linalg.norm(a) / np.linalg.norm(b)


def test_bf16_dots_keep_logprobs_and_gradients_near_fp32(tiny_model):
    """``dot_dtype="bfloat16"``: token log-probs and the parameter gradient of their sum stay close to
    the fp32 model's (the output head and attention are untouched), but are not the same numbers."""
    params, config = tiny_model
    ids = np.random.RandomState(2).randint(0, config.vocab_size, (2, 24))
    (lp32, flat32), (lp16, flat16) = (_logprobs_and_gradient(params, c, ids)
                                      for c in (config, dataclasses.replace(config, dot_dtype="bfloat16")))
    gap = np.abs(lp16 - lp32)[:, 1:]
    assert 1e-6 < gap.max() < 0.05, gap.max()
    cosine = _cosine(flat32, flat16)
    assert cosine > 0.99 and np.abs(flat16 - flat32).max() > 1e-4 * np.abs(flat32).max(), cosine


def test_bf16_grad_operand_matmul_keeps_the_forward_and_rounds_both_gradients():
    """``grad_operands="bfloat16"`` (``model.dot_dtype="bfloat16_grads"``): the value is the float32
    matmul's, bit for bit; both gradients are the float32-accumulated contractions of the bf16-rounded
    operands (cotangent included), returned in float32."""
    from jaxdebate.model.kernels import matmul

    kx, kw, kg = jax.random.split(jax.random.key(4), 3)
    x = jax.random.normal(kx, (2, 7, 24), jnp.float32)
    w = jax.random.normal(kw, (24, 40), jnp.float32)
    cot = jax.random.normal(kg, (2, 7, 40), jnp.float32)
    r = lambda a: np.asarray(a.astype(jnp.bfloat16), np.float64)  # noqa: E731
    out, vjp = jax.vjp(lambda x, w: matmul(x, w, grad_operands="bfloat16"), x, w)
    dx, dw = vjp(cot)
    assert out.dtype == dx.dtype == dw.dtype == jnp.float32
    np.testing.assert_array_equal(out, matmul(x, w))
    np.testing.assert_allclose(dx, np.einsum("bto,io->bti", r(cot), r(w)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw, np.einsum("bti,bto->io", r(x), r(cot)), rtol=1e-5, atol=1e-5)
    dx32, dw32 = jax.vjp(matmul, x, w)[1](cot)
    assert np.abs(np.asarray(dw) - np.asarray(dw32)).max() > 1e-3  # the rounding really happened


def test_bf16_grads_keep_the_logprobs_and_round_only_the_gradient(tiny_model):
    """``dot_dtype="bfloat16_grads"``: token log-probs are the fp32 model's, bit for bit (the sampler's
    and the learner's numbers stay equal), and the parameter gradient of their sum is close to fp32's
    but not the same. The gradient program rounds the operands of two contractions per projection (7 per
    layer) and two of the output head, and nothing else: the attention core stays float32."""
    params, config = tiny_model
    ids = np.random.RandomState(5).randint(0, config.vocab_size, (2, 24))
    mask = np.ones_like(ids, bool)
    grads16 = dataclasses.replace(config, dot_dtype="bfloat16_grads")
    (lp32, flat32), (lp16, flat16) = (_logprobs_and_gradient(params, c, ids) for c in (config, grads16))
    np.testing.assert_array_equal(lp16, lp32)
    cosine = _cosine(flat32, flat16)
    assert cosine > 0.999 and np.abs(flat16 - flat32).max() > 1e-4 * np.abs(flat32).max(), cosine
    forward = _dots_by_operand_dtype(jax.make_jaxpr(lambda p: token_logprobs(p, grads16, ids, mask))(params))
    assert set(forward) == {"float32"}, forward
    grad = jax.grad(lambda p: jnp.sum(token_logprobs(p, grads16, ids, mask)))
    grad_jaxpr = jax.make_jaxpr(grad)(params)
    backward = _dots_by_operand_dtype(grad_jaxpr)
    assert backward.get("bfloat16") == 2 * 7 + 2, backward
    # the layer scan stacks the rounded residuals as uint16 bits, not as bf16 arrays (kernels._stash)
    stacked = _scan_output_dtypes(grad_jaxpr)
    assert "bfloat16" not in stacked and "uint16" in stacked, stacked


def _equations(jaxpr):
    """Every equation of a jaxpr, those of nested jaxprs (jit, scan, custom_vjp) included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    yield from _equations(sub.jaxpr)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    yield from _equations(sub)


def _scan_output_dtypes(jaxpr) -> set[str]:
    """The dtypes of every ``scan`` equation's outputs in a jaxpr."""
    return {str(v.aval.dtype) for eqn in _equations(jaxpr.jaxpr) if eqn.primitive.name == "scan" for v in eqn.outvars}


def _dots_by_operand_dtype(jaxpr) -> dict[str, int]:
    """How many ``dot_general`` equations of a jaxpr take operands of each dtype."""
    counts: dict[str, int] = {}
    for eqn in _equations(jaxpr.jaxpr):
        if eqn.primitive.name == "dot_general":
            key = str(eqn.invars[0].aval.dtype)
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_bf16_dots_reach_the_seven_projections_and_the_default_has_no_bf16(tiny_model):
    """The programs themselves: with ``dot_dtype="bfloat16"`` the layer's forward holds exactly seven
    bf16 matmuls (q, k, v, o, gate, up, down: attention and the head stay f32); with the default, the
    gradient program holds no bf16 value at all (the default's numerics are the float32 model's)."""
    params, config = tiny_model
    ids = np.random.RandomState(3).randint(0, config.vocab_size, (2, 16))
    mask = np.ones_like(ids, bool)
    dots = dataclasses.replace(config, dot_dtype="bfloat16")
    forward16 = _dots_by_operand_dtype(jax.make_jaxpr(lambda p: token_logprobs(p, dots, ids, mask))(params))
    assert forward16.get("bfloat16") == 7, forward16
    grad32 = jax.make_jaxpr(jax.grad(lambda p: jnp.sum(token_logprobs(p, config, ids, mask))))(params)
    assert "bf16" not in str(grad32)
    assert set(_dots_by_operand_dtype(grad32)) == {"float32"}


@pytest.mark.parametrize("t,blocks", [(9, 1), (16, 1), (16, 2), (16, 4)])
def test_attention_vjp_equals_autodiff_of_the_plain_softmax_attention(t, blocks):
    """The attention core's hand-written VJP gives autodiff's gradients, padding queries (rows whose
    every key is masked), masked keys and packed segments included; split into causal query blocks
    (each block sees only the keys up to its end) it gives the same values and gradients."""
    from jaxdebate.model.kernels import attend

    b, kv, g, hd = 3, 2, 3, 8
    keys = jax.random.split(jax.random.key(3), 4)
    q = jax.random.normal(keys[0], (b, kv, g, t, hd))
    k, v = (jax.random.normal(key, (b, kv, t, hd)) for key in keys[1:3])
    cot = jax.random.normal(keys[3], (b, kv, g, t, hd))
    mask = np.tril(np.ones((t, t), bool))[None].repeat(b, 0)
    mask[0, :, 5:] = False   # keys 5.. of row 0 are padding
    mask[1, 7:, :] = False   # queries 7.. of row 1 are padding (no visible key)
    seg = np.repeat([1, 2, 3], -(-t // 3))[:t]  # row 2: three packed sequences
    mask[2] &= seg[:, None] == seg[None, :]

    def plain(q, k, v):
        scores = jnp.einsum("bkgtd,bksd->bkgts", q, k)
        probs = jax.nn.softmax(jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min), axis=-1)
        return jnp.einsum("bkgts,bksd->bkgtd", probs, v)

    # a query with no visible key (padding) gets an arbitrary finite output that nothing reads: it is
    # compared only for finiteness, and the loss never sends it a gradient
    seen = mask.any(-1)[:, None, None, :, None]
    cot = jnp.where(seen, cot, 0.0)
    (out, vjp), (ref, ref_vjp) = jax.vjp(lambda *a: attend(*a, mask, blocks), q, k, v), jax.vjp(plain, q, k, v)
    assert bool(jnp.all(jnp.isfinite(out)))
    np.testing.assert_allclose(np.asarray(jnp.where(seen, out, 0)), np.asarray(jnp.where(seen, ref, 0)), rtol=1e-5, atol=1e-6)
    for a, b_ in zip(vjp(cot), ref_vjp(cot)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b_), rtol=1e-5, atol=1e-5)


def test_causal_blocks_split_only_uncached_square_attention():
    from jaxdebate.model.kernels import causal_blocks

    assert causal_blocks(512, 512, cached=False) == 4
    assert causal_blocks(1024, 1024, cached=False) == 8
    assert causal_blocks(128, 128, cached=False) == 1   # one block of 128: nothing to skip
    assert causal_blocks(512, 512, cached=True) == 1    # a cache's slots need not be causal in index
    assert causal_blocks(512, 640, cached=False) == 1
    assert causal_blocks(320, 320, cached=False) == 1   # not a multiple of the block size


def test_left_padded_batch_equals_each_prompt_alone(tiny_model):
    params, config = tiny_model
    rng = np.random.RandomState(2)
    ids, mask = _left_padded(rng, config.vocab_size, [12, 5], 12)
    batch = np.asarray(logits(params, config, ids, mask))
    for i in range(2):
        alone = np.asarray(logits(params, config, ids[i][mask[i]][None]))[0]
        np.testing.assert_allclose(batch[i][mask[i]], alone, atol=2e-5)


def _reference_logprobs(params, config, ids, mask, temperature):
    full = logits(params, config, ids, mask) / temperature
    logp = jax.nn.log_softmax(full, axis=-1)
    picked = jnp.take_along_axis(logp[:, :-1], ids[:, 1:, None], axis=-1)[..., 0]
    entropy = -(jnp.exp(logp) * logp).sum(-1)[:, :-1]
    valid = mask[:, 1:] & mask[:, :-1]
    pad = jnp.zeros((ids.shape[0], 1))
    return (jnp.concatenate([pad, jnp.where(valid, picked, 0.0)], 1),
            jnp.concatenate([pad, jnp.where(valid, entropy, 0.0)], 1))


def test_token_logprobs_equal_log_softmax_of_logits(tiny_model):
    params, config = tiny_model
    ids, mask = _left_padded(np.random.RandomState(3), config.vocab_size, [16, 7], 16)
    ids, mask = jnp.asarray(ids), jnp.asarray(mask)
    for temperature in (1.0, 0.7):
        lp, ent = token_logprobs(params, config, ids, mask, temperature=temperature, with_entropy=True,
                                 chunk_size=5)
        ref_lp, ref_ent = _reference_logprobs(params, config, ids, mask, temperature)
        np.testing.assert_allclose(np.asarray(lp), np.asarray(ref_lp), atol=2e-5)
        np.testing.assert_allclose(np.asarray(ent), np.asarray(ref_ent), atol=2e-4)
    lp = np.asarray(lp)
    assert (lp[:, 0] == 0).all() and (lp[1, :10] == 0).all()  # t=0, padding, first real token
    assert (lp[0, 1:] < 0).all()


def test_token_logprobs_gradient_equals_full_logits_gradient(tiny_model):
    params, config = tiny_model
    ids, mask = _left_padded(np.random.RandomState(4), config.vocab_size, [10, 6], 10)
    weights = jnp.asarray(np.random.RandomState(5).randn(*ids.shape), jnp.float32)

    def chunked(p, cfg):
        return (token_logprobs(p, cfg, ids, mask, temperature=0.8, chunk_size=3) * weights).sum()

    def reference(p):
        return (_reference_logprobs(p, config, jnp.asarray(ids), jnp.asarray(mask), 0.8)[0] * weights).sum()

    reference_grads = jax.jit(jax.grad(reference))(params)
    for remat in ("dots", "full"):  # chunked head + per-layer rematerialisation
        cfg = dataclasses.replace(config, remat=remat)
        grads = jax.jit(jax.grad(chunked, argnums=0), static_argnums=1)(params, cfg)
        for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(reference_grads)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-4)


def test_token_logprobs_never_materialise_full_logits(tiny_model, monkeypatch):
    """Scratch memory scales with the chunk, not with ``[B, T, V]``: XLA's temp buffers for the
    forward and the backward stay a small fraction of the full fp32 logits (16 chunks here; a
    materialised head would need at least ``full_bytes`` on its own) once the logits exceed what
    the backward pass may keep."""
    from jaxdebate.model import logprobs as logprobs_module

    monkeypatch.setattr(logprobs_module, "KEEP_LOGITS_BYTES", 0)
    params, config = tiny_model
    b, t, chunk = 8, 128, 32
    full_bytes = b * t * config.vocab_size * 4
    ids = jnp.zeros((b, t), jnp.int32)
    mask = jnp.ones((b, t), bool)

    def loss(p):
        return token_logprobs(p, config, ids, mask, chunk_size=chunk).sum()

    forward_temp = jax.jit(loss).lower(params).compile().memory_analysis().temp_size_in_bytes
    backward_temp = jax.jit(jax.grad(loss)).lower(params).compile().memory_analysis().temp_size_in_bytes
    assert forward_temp < full_bytes / 4, (forward_temp, full_bytes)
    assert backward_temp < full_bytes / 2, (backward_temp, full_bytes)


def test_kept_logits_give_the_rematerialised_gradients(tiny_model, monkeypatch):
    """The backward pass that reuses the chunks' logits equals the one that recomputes them."""
    from jaxdebate.model import logprobs as logprobs_module

    params, config = tiny_model
    ids = jnp.asarray(np.random.RandomState(4).randint(0, config.vocab_size, (2, 40)), jnp.int32)

    def grads():
        loss = lambda p: hidden_logprobs(p, config, forward(p, config, ids)[0], ids, chunk_size=16)[0].sum()  # noqa: E731
        return jax.jit(jax.value_and_grad(loss))(params)

    kept = grads()
    monkeypatch.setattr(logprobs_module, "KEEP_LOGITS_BYTES", 0)
    recomputed = grads()
    for a, b in zip(jax.tree.leaves(kept), jax.tree.leaves(recomputed)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "lm_head"])
@pytest.mark.parametrize("keep", [True, False], ids=["kept", "recomputed"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_head_vjp_gives_autodiff_gradients_of_log_softmax(tie, keep, dtype, monkeypatch):
    """The output head's hand-written VJP: the gradients of a weighted sum of log-probs and entropies,
    in the head's weights and in the hidden states, equal autodiff through ``jax.nn.log_softmax`` of
    the full logits (temperature, a last chunk with padding; kept or recomputed chunk logits)."""
    from jaxdebate.model import logprobs as logprobs_module

    if not keep:
        monkeypatch.setattr(logprobs_module, "KEEP_LOGITS_BYTES", 0)
    config = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                         num_kv_heads=1, head_dim=16, tie_word_embeddings=tie, dtype=dtype)
    rng = np.random.RandomState(11)
    table = jnp.asarray(rng.randn(300, 32) * 0.3, jnp.float32)
    params = {"embed_tokens": {"embedding": table}} if tie else {"lm_head": {"kernel": table.T}}
    hidden = jnp.asarray(rng.randn(3, 7, 32), jnp.float32)
    targets = jnp.asarray(rng.randint(0, 300, (3, 7)), jnp.int32)
    w_lp, w_ent = (jnp.asarray(rng.randn(3, 7), jnp.float32) for _ in range(2))

    def ours(p, h):
        lp, ent = hidden_logprobs(p, config, h, targets, temperature=0.7, with_entropy=True, chunk_size=5)
        return (lp * w_lp + ent * w_ent).sum()

    def reference(p, h):
        logp = jax.nn.log_softmax(head_logits(p, config, h) / 0.7, axis=-1)
        lp = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
        ent = -(jnp.exp(logp) * logp).sum(-1)
        return (lp * w_lp + ent * w_ent).sum()

    (value, grads), (ref_value, ref_grads) = (jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(params, hidden)
                                              for f in (ours, reference))
    tol = 1e-5 if dtype == "float32" else 2e-2  # bf16: rounding of the operands and of the gradients
    np.testing.assert_allclose(float(value), float(ref_value), rtol=tol)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        scale = float(np.abs(np.asarray(b, np.float32)).max())
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=tol * scale)
    # without the entropy, the log-probs' gradient alone
    only_lp = jax.grad(lambda p: (hidden_logprobs(p, config, hidden, targets, chunk_size=4)[0] * w_lp).sum())(params)
    ref_lp = jax.grad(lambda p: (jnp.take_along_axis(jax.nn.log_softmax(head_logits(p, config, hidden), -1),
                                                     targets[..., None], -1)[..., 0] * w_lp).sum())(params)
    a, b = jax.tree.leaves(only_lp)[0], jax.tree.leaves(ref_lp)[0]
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                               atol=tol * float(np.abs(np.asarray(b, np.float32)).max()))


def test_kv_cache_extended_by_several_tokens_equals_full_forward(tiny_model):
    """A prompt written into a cache in two pieces (the second attends to the first's slots, as the
    sampler's shared prompt heads do) gives the uncached forward's logits."""
    params, config = tiny_model
    ids = np.random.RandomState(8).randint(0, config.vocab_size, (2, 12))
    expected = np.asarray(logits(params, config, ids))
    step = jax.jit(forward, static_argnums=1)
    cache = init_cache(config, 2, 16)
    ones = lambda n: np.ones((2, n), bool)  # noqa: E731
    _, cache = step(params, config, ids[:, :5], np.arange(5)[None].repeat(2, 0), ones(5), cache)
    h, cache = step(params, config, ids[:, 5:], np.arange(5, 12)[None].repeat(2, 0), ones(7), cache)
    np.testing.assert_allclose(np.asarray(head_logits(params, config, h)), expected[:, 5:], atol=2e-5)


def test_kv_cache_forward_equals_full_forward(tiny_model):
    params, config = tiny_model
    ids, mask = _left_padded(np.random.RandomState(6), config.vocab_size, [9, 4], 9)
    extra = np.random.RandomState(7).randint(0, config.vocab_size, (2, 5))
    full_ids = np.concatenate([ids, extra], 1)
    full_mask = np.concatenate([mask, np.ones_like(extra, bool)], 1)
    expected = np.asarray(logits(params, config, full_ids, full_mask))

    step = jax.jit(forward, static_argnums=1)
    cache = init_cache(config, 2, 16)
    positions = positions_from_mask(mask)
    h, cache = step(params, config, ids, positions, mask, cache)
    got = [head_logits(params, config, h)]
    pos = positions[:, -1]
    for j in range(extra.shape[1]):
        pos = pos + 1
        h, cache = step(params, config, extra[:, j:j + 1], pos[:, None], np.ones((2, 1), bool), cache)
        got.append(head_logits(params, config, h))
    got = np.concatenate([np.asarray(g) for g in got], 1)
    assert int(cache["index"]) == 14
    np.testing.assert_allclose(got[full_mask], expected[full_mask], atol=2e-5)


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="model.num_heads"):
        LlamaConfig(num_heads=9, num_kv_heads=4)
    with pytest.raises(ConfigError, match="model.dtype"):
        LlamaConfig(dtype="float16")
    with pytest.raises(ConfigError, match="model.remat"):
        LlamaConfig(remat="sometimes")
    with pytest.raises(ConfigError, match="model.dot_dtype"):
        LlamaConfig(dot_dtype="float16")
    with pytest.raises(ConfigError, match="model.dot_dtype must be 'compute' with model.dtype=bfloat16"):
        LlamaConfig(dtype="bfloat16", dot_dtype="bfloat16")
    config = LlamaConfig()
    assert hash(config) == hash(LlamaConfig())
    assert LlamaConfig.from_hf(config.to_hf()) == config
    assert config.num_params == 134_515_008  # SmolLM2-135M
