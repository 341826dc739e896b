"""The array work of one GRPO step, as functions: a debate batch becomes training samples (credit ->
advantages -> filter), and the samples become one update. The trainer (:mod:`jaxdebate.train`)
wraps them with sampling, the weight sync, checkpoints and logging.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from jaxdebate.debate.batch import DebateBatch
from jaxdebate.model import shard_batch
from jaxdebate.rl.batching import Sample, make_microbatches
from jaxdebate.rl.config import LossConfig
from jaxdebate.rl.grpo import Learner, TrainState
from jaxdebate.shaping import ShapingConfig, compute_advantages, reward_metrics, sample_filter, shape_rewards
from jaxdebate.shaping import team_reward


@dataclasses.dataclass(frozen=True)
class Signal:
    """What a batch gives the learner: its training samples, and the arrays the step's metrics
    are computed from (reward and filter statistics, advantages [B, G, A, R])."""

    samples: list[Sample]
    reward: dict[str, Any]
    filters: dict[str, Any]
    advantages: np.ndarray


def training_samples(batch: DebateBatch, shaping: ShapingConfig, loss: LossConfig) -> Signal:
    """Per-turn credit (``shape_rewards``) -> group advantages -> filters -> one :class:`Sample` per
    kept turn with a completion. Under ``loss.truncated_as_wrong`` a truncated turn is a wrong
    answer with no vote before shaping; under ``loss.per_agent_norm`` the advantage groups and the
    zero-signal filter's groups are split by agent."""
    correct, votes, truncated = batch.correct, batch.votes, batch.truncated()
    if loss.truncated_as_wrong:
        correct, votes = np.where(truncated, 0.0, correct), np.where(truncated, -1, votes)
    credit = shape_rewards(shaping, correct, votes, batch.gold, batch.active)
    advantages = compute_advantages(credit, batch.active, estimator=loss.estimator, grouping=loss.grouping,
                                    eps=loss.advantage_eps, per_agent=loss.per_agent_norm)
    keep, filters = sample_filter(credit, batch.active, truncated, grouping=loss.grouping,
                                  drop_zero_signal=loss.filter_zero_signal, drop_truncated=loss.filter_truncated,
                                  per_agent=loss.per_agent_norm)
    reward = reward_metrics(correct, credit, team_reward(votes, batch.gold, batch.active), batch.active)
    keep, advantages = np.asarray(keep), np.asarray(advantages)
    samples = [Sample(np.asarray(t.prompt_ids), np.asarray(t.completion_ids), np.asarray(t.logprobs),
                      float(advantages[t.index]))
               for t in batch.turns if keep[t.index] and len(t.completion_ids)]
    return Signal(samples, reward, filters, advantages)


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a step's samples are laid out for the learner (the config values :func:`update` needs)."""

    max_len: int
    rows_cap: int
    max_tokens: int
    aggregation: str
    max_completion: int
    pad_id: int
    min_rows: int
    packing: bool
    ppo_epochs: int
    split_short_rows: bool = False


def update(learner: Learner, state: TrainState, samples: list[Sample], layout: Layout,
           mesh: Any = None) -> tuple[TrainState, dict[str, float], dict[str, float]]:
    """``loss.ppo_epochs`` optimiser updates on ``samples`` (packed micro-batches, sharded over
    ``mesh``); ``(state, learner metrics, layout stats)``. No samples: the update counter advances
    alone, so the schedule stays aligned with the steps."""
    if not samples:
        return (dataclasses.replace(state, step=state.step + layout.ppo_epochs), {},
                {"samples": 0.0, "sequence_tokens": 0.0})
    mbs, stats = make_microbatches(
        samples, max_len=layout.max_len, rows_cap=layout.rows_cap, max_tokens=layout.max_tokens,
        aggregation=layout.aggregation, max_completion=layout.max_completion, pad_id=layout.pad_id,
        min_rows=layout.min_rows, packing=layout.packing, split_short_rows=layout.split_short_rows,
    )
    if mesh is not None:
        mbs = [shard_batch(mb, mesh) for mb in mbs]
    if layout.ppo_epochs > 1:
        mbs = [dict(mb, old_logprobs=learner.logprobs(state.params, mb)) for mb in mbs]
    metrics: dict[str, float] = {}
    for _ in range(layout.ppo_epochs):
        state, metrics = learner.update(state, mbs)
    return state, metrics, stats


def sampling_seed(rng: jax.Array) -> tuple[jax.Array, int]:
    """The RNG after a step and that step's sampling seed."""
    rng, sub = jax.random.split(rng)
    return rng, int(jax.random.randint(sub, (), 0, 2**31 - 1))
