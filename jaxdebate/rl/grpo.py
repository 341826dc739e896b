"""The jitted GRPO/RLOO learner step (DESIGN §5).

A training step is ``accumulate`` over the step's micro-batches (each a jitted forward+backward that
adds its gradient into a donated accumulator) followed by one jitted ``apply`` (global-norm clip,
optax update, donated train state). Token log-probs come from the model's hidden states through its
chunked ``hidden_logprobs`` (the ``[B, T, vocab]`` logits are never materialised), evaluated only in
each row's completion window, at the sampler's temperature, so learner and sampler log-probs follow
the same convention (:mod:`jaxdebate.sampling.base`).

With ``model.lora`` enabled (LoRA-GRPO) the trainable tree is a LoRA adapter on the frozen base
(:mod:`jaxdebate.model.lora`): the optimiser state covers the adapter only, the KL reference is the
base plus the adapter of the last hard update (no second full tree), and :meth:`Learner.weights`
merges the adapter for sampling and export.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from jaxdebate.model import LlamaConfig, forward, hidden_logprobs
from jaxdebate.model import lora as lora_lib
from jaxdebate.model.config import LoraConfig
from jaxdebate.rl.batching import FORWARD_KEYS, WINDOW_KEYS
from jaxdebate.rl.config import LossConfig, OptimizerConfig
from jaxdebate.rl.losses import metric_sums, policy_loss
from jaxdebate.rl.optim import AdamWBound, guarded_apply, lr_schedule, make_optimizer


@flax.struct.dataclass
class TrainState:
    """Everything the learner updates: policy, optimiser state, KL reference, update count. With
    LoRA, ``params`` and ``ref_params`` are adapters (the base lives in the :class:`Learner`)."""

    params: Any
    opt_state: Any
    ref_params: Any
    step: jax.Array


class Learner:
    """Jitted pieces of the train step, bound to one model and loss/optimiser configuration.

    ``temperature`` must be the sampler's (the log-prob convention is shared). State arrays are donated:
    never reuse a ``TrainState`` after passing it to :meth:`apply` or :meth:`update`.
    """

    def __init__(self, model_config: LlamaConfig, loss: LossConfig, optimizer: OptimizerConfig,
                 total_steps: int, *, temperature: float = 1.0, logprob_chunk: int = 1024,
                 lora: LoraConfig | None = None, seed: int = 0) -> None:
        self.model_config = model_config
        self.lora = lora if lora is not None and lora.enabled else None
        self.seed = seed
        self.base = None  # the frozen base tree under LoRA (set by init_state / set_base)
        self.loss_cfg = loss
        self.opt_cfg = optimizer
        self.temperature = float(temperature) if temperature > 0 else 1.0
        self.chunk = logprob_chunk
        self.schedule = lr_schedule(optimizer, total_steps)
        self.tx = make_optimizer(optimizer, total_steps)
        self.bound = AdamWBound.of(optimizer)  # what lets the guard decide before the update
        self._accumulate = jax.jit(self._accumulate_impl, donate_argnums=(2,))
        self._apply = jax.jit(self._apply_impl, donate_argnums=(0,))
        self._logprobs = jax.jit(self._logprobs_impl)
        self._merge = jax.jit(self._full)

    # ----------------------------------------------------------------------------- pure functions

    def _full(self, trainable, base):
        """The model's parameter tree: the trainable tree itself, or base + LoRA adapter."""
        if self.lora is None:
            return trainable
        return lora_lib.merge(base, trainable, self.lora.scale)

    def _lp(self, params, batch, *, with_entropy: bool):
        """``(lp, entropy)`` ``[R, C]`` of the completion window (zeros outside ``loss_mask``)."""
        hidden, _ = forward(params, self.model_config, batch["tokens"], positions=batch["positions"],
                            segment_ids=batch["segment_ids"], prefix_ids=batch["prefix_ids"])
        h = jnp.take_along_axis(hidden, batch["window_index"][..., None], axis=1)
        lp, ent = hidden_logprobs(
            params, self.model_config, h, batch["targets"], temperature=self.temperature,
            with_entropy=with_entropy, chunk_size=self.chunk,
        )
        mask = batch["loss_mask"]
        return jnp.where(mask, lp, 0.0), jnp.where(mask, ent, 0.0)

    def _logprobs_impl(self, params, batch, base=None):
        return self._lp(self._full(params, base), batch, with_entropy=False)[0]

    def _loss(self, params, ref_params, batch, base=None):
        """The micro-batch's share of the step's loss, ``loss.policy_loss`` choosing the policy-gradient
        term (:mod:`jaxdebate.rl.losses`; ``gspo`` reduces by the batch's ``window_sequence``)."""
        cfg = self.loss_cfg
        lp, entropy = self._lp(self._full(params, base), batch, with_entropy=True)
        old = batch["old_logprobs"] if "old_logprobs" in batch else jax.lax.stop_gradient(lp)
        if cfg.beta > 0:
            ref = jax.lax.stop_gradient(self._lp(self._full(ref_params, base), batch, with_entropy=False)[0])
        else:
            ref = jax.lax.stop_gradient(lp)
        loss, terms = policy_loss(
            lp, old, batch["sampler_logprobs"], ref, batch["advantages"], batch["token_weights"],
            clip_low=cfg.clip_eps, clip_high=cfg.clip_high, is_cap=cfg.importance_weight_cap,
            beta=cfg.beta, variant=cfg.policy_loss,
            sequence_ids=batch["window_sequence"] if cfg.policy_loss == "gspo" else None,
        )
        sums, maxes = metric_sums(
            terms, batch["loss_mask"], old, batch["sampler_logprobs"], jax.lax.stop_gradient(entropy)
        )
        sums["loss"] = loss
        return loss, (sums, maxes)

    def _accumulate_impl(self, params, ref_params, grads, batch, base=None):
        (_, aux), g = jax.value_and_grad(self._loss, has_aux=True)(params, ref_params, batch, base)
        return jax.tree.map(jnp.add, grads, g), aux

    def _apply_impl(self, state: TrainState, grads, loss):
        # a skipped (non-finite) update still advances the counter, so the schedule stays aligned with
        # the trainer's steps
        params, opt_state, metrics = guarded_apply(self.tx, state.params, state.opt_state, grads, loss,
                                                   grad_clip=self.opt_cfg.grad_clip,
                                                   bound=self.bound)
        metrics["lr"] = self.schedule(state.step)
        return dataclasses.replace(state, params=params, opt_state=opt_state, step=state.step + 1), metrics

    # ----------------------------------------------------------------------------- stateful shell

    def _fresh(self, params) -> TrainState:
        trainable = params
        if self.lora is not None:
            trainable = lora_lib.init(params, self.lora, jax.random.key(self.seed))
        ref = jax.tree.map(jnp.copy, trainable)
        return TrainState(params=trainable, opt_state=self.tx.init(trainable), ref_params=ref,
                          step=jnp.zeros((), jnp.int32))

    def init_state(self, params) -> TrainState:
        """A fresh state for the model ``params``: the policy is ``params`` (or, with LoRA, a fresh
        adapter on the frozen base ``params``), the reference policy a copy of it."""
        self.set_base(params)
        return self._fresh(params)

    def set_base(self, params) -> None:
        """Under LoRA, the frozen base tree the adapters apply to (before restoring a checkpoint)."""
        self.base = params if self.lora is not None else None

    def abstract_state(self, params) -> TrainState:
        """Shapes/dtypes/shardings of a state (the restore target for orbax)."""
        return jax.eval_shape(self._fresh, params)

    def weights(self, trainable, *, copy: bool = True):
        """The model tree of a trainable tree (base + adapter under LoRA), for sampling and export;
        a fresh tree (``copy``) that a later donated update cannot invalidate."""
        if self.lora is None:
            return jax.tree.map(jnp.copy, trainable) if copy else trainable
        return self._merge(trainable, self.base)

    def logprobs(self, params, batch) -> jax.Array:
        """Completion-window log-probs ``[R, C]`` of a micro-batch under ``params`` (no gradient)."""
        return self._logprobs(params, {k: batch[k] for k in FORWARD_KEYS + WINDOW_KEYS}, self.base)

    def update(self, state: TrainState, micro_batches: Sequence[dict[str, np.ndarray]]
               ) -> tuple[TrainState, dict[str, float]]:
        """One optimiser update from all ``micro_batches`` of a step (their gradients summed).

        For ``loss.ppo_epochs > 1`` the batches must carry ``old_logprobs``; otherwise the learner's
        own log-probs of this very forward pass serve as "old" (the same values, one pass fewer).
        """
        if not micro_batches:
            raise ValueError("update() needs at least one micro-batch")
        grads = jax.tree.map(jnp.zeros_like, state.params)
        sums: dict[str, float] = {}
        maxes: dict[str, float] = {}
        for mb in micro_batches:
            grads, (s, m) = self._accumulate(state.params, state.ref_params, grads, mb, self.base)
            for k, v in s.items():
                sums[k] = sums.get(k, 0.0) + float(v)
            for k, v in m.items():
                maxes[k] = max(maxes.get(k, 0.0), float(v))
        state, extra = self._apply(state, grads, jnp.float32(sums.get("loss", 0.0)))
        return state, update_metrics(sums, maxes, extra)

    def hard_update_reference(self, state: TrainState) -> TrainState:
        """The reference policy becomes a copy of the current policy."""
        return dataclasses.replace(state, ref_params=jax.tree.map(jnp.copy, state.params))


def update_metrics(sums: dict[str, float], maxes: dict[str, float], extra: dict[str, Any]) -> dict[str, float]:
    """Token means of the summed metrics, plus the apply-step metrics."""
    tokens = max(sums.get("tokens", 0.0), 1.0)
    out = {"loss": sums.get("loss", 0.0), "tokens": sums.get("tokens", 0.0)}
    for key, value in sums.items():
        if key not in ("loss", "tokens"):
            out[key] = value / tokens
    out.update(maxes)
    out.update({k: float(v) for k, v in extra.items()})
    return out

