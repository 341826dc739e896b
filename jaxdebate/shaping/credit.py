"""Credit modes (DESIGN §4, `shaping.credit`): what each turn is trained on, from the shaped rewards.

`turn`: each turn's own shaped reward. `return`: the discounted sum of the same agent's shaped
rewards from that round on over its active rounds,
credit[.., a, r] = sum_{t >= r, active} discount^(t - r) * shaped[.., a, t] (inactive turns 0),
under which potential-based shaping with discount == gamma telescopes to the discounted return of
correctness minus Phi(r), a function of the rounds before r only (for agents whose active rounds are
a prefix, as in a debate).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

CREDIT_MODES = ("turn", "return")


def discounted_return(shaped, active, discount):
    """credit f32 [..., R]: the reverse recursion C[r] = s[r] + discount * C[r + 1] over the rounds
    axis (last), with s = shaped on active turns and 0 elsewhere; inactive turns get 0.

    A `lax.scan` over R (no Python loop). Each step adds the product carried from the step before
    and carries discount * C[r] on, so no multiply feeds an add in the same step: the backend cannot
    contract them into a fused multiply-add, and the result equals a float32 loop bit for bit.
    """
    s = jnp.where(active, shaped, 0.0).astype(jnp.float32)
    discount = jnp.asarray(discount, jnp.float32)

    def step(discounted_after, s_r):
        c = s_r + discounted_after
        return discount * c, c

    rounds_first = jnp.moveaxis(s, -1, 0)
    _, credit = jax.lax.scan(step, jnp.zeros_like(rounds_first[0]), rounds_first, reverse=True)
    return jnp.where(active, jnp.moveaxis(credit, 0, -1), 0.0)


def apply_credit(shaped, active, credit: str, discount):
    """The per-turn credit advantages are computed from: `shaped` itself under `turn`, the
    discounted return under `return` (`credit` is static, `discount` may be traced)."""
    if credit == "turn":
        return jnp.where(active, shaped, 0.0)
    if credit == "return":
        return discounted_return(shaped, active, discount)
    raise ValueError(f"credit must be one of {', '.join(CREDIT_MODES)}, got {credit!r}")
