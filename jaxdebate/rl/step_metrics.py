"""A training step's logged metrics, assembled from what the step computed (pure: no state, no I/O).

Names are stable: ``train/*`` (rewards, accuracy, filters), ``learner/*``, ``batch/*`` (layout),
``weights/*`` (which policy the sampler and reference hold), ``sampler/*``, ``time/*`` and
``throughput/*`` (wall clock; excluded when runs are compared, see ``NONDETERMINISTIC_PREFIXES``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxdebate.debate.batch import DebateBatch
from jaxdebate.sampling.base import sampler_metrics
from jaxdebate.shaping import advantage_metrics

# Keys that vary between otherwise identical runs (wall-clock, what this process has compiled so far).
NONDETERMINISTIC_PREFIXES = ("time", "time/", "throughput/", "sampler/concurrency", "sampler/compiled_",
                             "sampler/shared_server",  # where it ran: a sweep's shared server, or its own
                             "sampler/prefill_seconds", "sampler/decode_seconds", "sync/")
_FILTER_KEYS = ("zero_advantage_fraction", "truncated_fraction", "kept_fraction", "n_kept")


def train_metrics(
    batch: DebateBatch,
    *,
    reward: Mapping[str, Any],
    filters: Mapping[str, Any],
    advantages: np.ndarray,
    learner: Mapping[str, float],
    layout: Mapping[str, float],
    updated: bool,
    step: int,
    sampler_version: int,
    ref_version: int,
    sampler_stats: Mapping[str, Any],
) -> dict[str, float]:
    """Metrics of step ``step`` (1-based, just completed) from its debates and the update.

    ``reward``: :func:`jaxdebate.shaping.reward_metrics`; ``filters``: the stats of
    :func:`jaxdebate.shaping.sample_filter`; ``advantages`` f32 [B, G, A, R]; ``learner``: the
    update's metrics; ``layout``: the micro-batches' stats; ``sampler_stats``: ``Sampler.stats()``.
    """
    active = batch.active
    turns = max(len(batch.turns), 1)
    m: dict[str, float] = {f"train/{k}": float(v) for k, v in reward.items()}
    m["train/accuracy"] = float(batch.correct[active].mean()) if active.any() else 0.0
    m["train/debate_accuracy"] = float(batch.debate_correct().mean())
    for k in _FILTER_KEYS:
        m[f"train/{k}"] = float(filters[k])
    m["train/no_answer_fraction"] = batch.stats.get("no_answer", 0) / turns
    m["train/completion_tokens_mean"] = batch.stats.get("completion_tokens", 0) / turns
    m["train/samples_fingerprint"] = samples_fingerprint(batch)
    m["sampler/concurrency"] = float(batch.stats.get("mean_in_flight", 0.0))
    m["train/advantage_abs_mean"] = float(np.abs(advantages[active]).mean()) if active.any() else 0.0
    m.update({f"train/{k}": float(v) for k, v in advantage_metrics(advantages, active).items()})
    m.update({f"train/{k}": v for k, v in response_lengths(batch).items()})
    m.update({f"learner/{k}": float(v) for k, v in learner.items()})
    m["learner/updated"] = float(updated)
    m.update({f"batch/{k}": float(v) for k, v in layout.items()})
    m["weights/sampler_version"] = float(sampler_version)
    m["weights/ref_version"] = float(ref_version)
    oldest = min((t.weight_version for t in batch.turns), default=step - 1)
    m["weights/sampler_lag"] = float(step - 1 - oldest)
    m.update(sampler_metrics(sampler_stats, step))
    return m


def samples_fingerprint(batch: DebateBatch) -> float:
    """A 48-bit hash of every played turn's position and sampled tokens (exact as a float): equal in
    two runs exactly when they sampled the same debates. The arms of a seed block share their
    sampling random numbers, so their first steps (same weights) must show the same fingerprint."""
    digest = hashlib.blake2b(digest_size=6)
    for t in sorted(batch.turns, key=lambda t: t.index):
        digest.update(np.asarray([*t.index, len(t.completion_ids), *t.completion_ids], np.int64).tobytes())
    return float(int.from_bytes(digest.digest(), "big"))


def response_lengths(batch: DebateBatch) -> dict[str, float]:
    """Mean completion tokens of the played (active) turns per agent and per round:
    ``completion_tokens/agent_{a}`` and ``completion_tokens/round_{r}`` (0 where none was played).
    A length that drifts apart between agents or rounds is what a length-sensitive aggregation or a
    per-round credit is first seen in."""
    _, _, n_agents, n_rounds = batch.active.shape
    lengths = np.zeros(batch.active.shape, np.float64)
    played = np.zeros(batch.active.shape, bool)
    for t in batch.turns:
        lengths[t.index] = len(t.completion_ids)
        played[t.index] = True
    played &= np.asarray(batch.active, bool)

    def mean(axis: tuple[int, ...]) -> np.ndarray:
        n = played.sum(axis=axis)
        return np.where(n > 0, (lengths * played).sum(axis=axis) / np.maximum(n, 1), 0.0)

    per_agent, per_round = mean((0, 1, 3)), mean((0, 1, 2))
    out = {f"completion_tokens/agent_{a}": float(per_agent[a]) for a in range(n_agents)}
    out.update({f"completion_tokens/round_{r}": float(per_round[r]) for r in range(n_rounds)})
    return out


def timing_metrics(seconds: Mapping[str, float], *, step_seconds: float, sampled_tokens: float,
                   learner_tokens: float) -> dict[str, float]:
    """``time/<phase>`` (``seconds`` from the phase timer), ``time/step`` (the step plus its
    validation) and tokens/s of sampling, learning and the whole step."""
    m = {f"time/{phase}": float(value) for phase, value in seconds.items()}
    m["time/step"] = step_seconds + seconds.get("validation", 0.0)
    m["throughput/sampled_tokens_per_s"] = sampled_tokens / max(seconds.get("sampling", 0.0), 1e-9)
    m["throughput/learner_tokens_per_s"] = learner_tokens / max(seconds.get("learning", 0.0), 1e-9)
    m["throughput/tokens_per_s"] = sampled_tokens / max(step_seconds, 1e-9)
    return m
