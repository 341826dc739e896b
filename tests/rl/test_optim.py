"""The update's non-finite guard (rl/optim.py): AdamWBound's promise holds on adversarial gradients, the
in-place guard gives the unguarded update bit for bit and keeps the state on what it refuses, and it
really runs in place (no second copy of the weights in the compiled update)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdebate.rl.optim import AdamWBound, guarded_apply

BETAS = [(0.9, 0.999), (0.9, 0.95), (0.0, 0.999), (0.5, 0.3), (0.95, 0.999)]


def _sequences(b1, b2, rng):
    """Gradient streams meant to push ``|m_hat| / sqrt(v_hat)`` up: Cauchy-Schwarz's equality case
    (magnitudes growing as (b2/b1)^j), a spike after a long quiet stretch, sign flips, heavy tails."""
    grow = b2 / b1 if b1 > 0 else 1.0
    yield np.array([min(grow ** j, 1e15) * 1e-3 for j in range(200)])
    yield np.concatenate([np.full(3000, 1e-6), [1.0]])
    yield np.concatenate([[1e-6] * 5, [1.0, -1.0] * 20, [3.0]])
    yield rng.choice([-1, 1], 500) * np.exp(rng.normal(0, 6, 500))


@pytest.mark.parametrize("b1,b2", BETAS)
def test_adamw_bound_holds_on_adversarial_gradients(b1, b2):
    bound = AdamWBound(b1, b2, weight_decay=0.0)
    worst = 0.0
    for seq in _sequences(b1, b2, np.random.default_rng(0)):
        tx = optax.scale_by_adam(b1=b1, b2=b2, eps=1e-8)
        state = tx.init(jnp.zeros(1))
        step = jax.jit(tx.update)
        for g in seq.astype(np.float32):
            u, state = step(jnp.array([g]), state)
            worst = max(worst, float(jnp.abs(u).max()))
    assert worst <= bound.max_direction
    # and it is not vacuous: these streams reach at least a sixth of its doubled sup
    assert worst >= (bound.max_direction - 1) / 12, (worst, bound.max_direction)


def test_no_bound_where_adams_ratio_is_unbounded():
    assert AdamWBound(0.9, 0.81, 0.0).max_direction is None
    assert AdamWBound(0.5, 0.0, 0.0).max_direction is None
    assert AdamWBound(0.0, 0.0, 0.0).max_direction == pytest.approx(3.0)  # |g / |g|| = 1, doubled, + 1


def _tree(scale=1.0):
    k1, k2 = jax.random.split(jax.random.key(3))
    return {"w": scale * jax.random.normal(k1, (64, 32)), "b": scale * jax.random.normal(k2, (32,))}


def _apply(tx, bound, params, opt_state, grads, loss=0.5):
    fn = jax.jit(lambda p, s, g, l: guarded_apply(tx, p, s, g, l, grad_clip=1.0, bound=bound))
    return fn(params, opt_state, grads, jnp.float32(loss))


def _same(a, b):
    return all(bool(jnp.array_equal(x, y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_in_place_guard_equals_the_unguarded_update_and_the_check_after():
    lr, wd = 1e-3, 0.01
    tx = optax.adamw(lr, weight_decay=wd)
    bound = AdamWBound(0.9, 0.999, wd, max_lr=lr)
    params = _tree()

    @jax.jit
    def unguarded(p, s, grads):
        norm = optax.global_norm(grads)
        u, s = tx.update(jax.tree.map(lambda x: x * jnp.minimum(1.0, 1.0 / (norm + 1e-6)), grads), s, p)
        return optax.apply_updates(p, u), s

    states = {"in place": (params, tx.init(params)), "after": (params, tx.init(params)),
              "unguarded": (params, tx.init(params))}
    for i in range(3):
        grads = _tree(scale=10.0 ** i)  # the third is clipped from norm ~4,500
        for name, (p, s) in states.items():
            if name == "unguarded":
                states[name] = unguarded(p, s, grads)
                continue
            p, s, metrics = _apply(tx, bound if name == "in place" else None, p, s, grads)
            assert all(float(metrics[f"nonfinite/{k}"]) == 0.0 for k in ("loss", "grad_norm", "params"))
            states[name] = (p, s)
    assert _same(states["in place"], states["unguarded"]) and _same(states["after"], states["unguarded"])


@pytest.mark.parametrize("what", ["loss", "grad_norm", "params"])
def test_both_guards_keep_the_state_on_what_they_refuse(what):
    # lr 3e38 with weight decay 1 moves a weight by 3e38 * (1 + |w|): an overflow the check after sees
    lr, wd = (3e38, 1.0) if what == "params" else (1e-3, 0.0)
    tx = optax.adamw(lr, weight_decay=wd)
    params = _tree()
    grads = _tree()
    if what == "grad_norm":
        grads = {**grads, "b": grads["b"].at[3].set(jnp.inf)}
    for bound in (AdamWBound(0.9, 0.999, wd, max_lr=lr), None):
        state = tx.init(params)
        p, s, metrics = _apply(tx, bound, params, state, grads, loss=jnp.nan if what == "loss" else 0.5)
        assert float(metrics[f"nonfinite/{what}"]) == 1.0, (bound, metrics)
        assert _same((p, s), (params, state))


def test_the_bound_is_conservative_only_near_the_floats_range():
    """lr 1e36 moves unit weights by ~1e36 (finite) and passes; lr 1e37's first step (<= 1e37, finite too)
    is refused: the promise keeps an 8x margin and twice Adam's ratio bound."""
    params, grads = _tree(), _tree()
    for lr, refused in ((1e36, False), (1e37, True)):
        tx = optax.adamw(lr)
        p, _, metrics = _apply(tx, AdamWBound(0.9, 0.999, 0.0, max_lr=lr), params, tx.init(params), grads)
        assert float(metrics["nonfinite/params"]) == float(refused)
        assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(p))


def test_the_guard_with_a_bound_updates_in_place():
    """The compiled update with a bound needs no buffer the size of a leaf besides the donated ones;
    checking the results after keeps the old and the new tree apart."""
    tx = optax.adamw(1e-3)
    params = {"w": jnp.ones((512, 1024))}  # 2 MiB
    state = tx.init(params)
    temp = {}
    for name, bound in (("in place", AdamWBound(0.9, 0.999, 0.0, max_lr=1e-3)), ("after", None)):
        fn = jax.jit(lambda p, s, g, b=bound: guarded_apply(tx, p, s, g, jnp.float32(0), grad_clip=1.0, bound=b)[:2],
                     donate_argnums=(0, 1))
        temp[name] = fn.lower(params, state, params).compile().memory_analysis().temp_size_in_bytes
    leaf = params["w"].nbytes
    assert temp["in place"] < leaf / 4 and temp["after"] >= 2 * leaf, temp
