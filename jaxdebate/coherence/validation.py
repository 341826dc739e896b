"""Per-epoch validation of preference training (issue 28): held-out pair metrics, the epoch log, and
the early-stopping rule, as plain functions of numbers.

An epoch's row (``train/epochs.jsonl``) holds the means of its updates (``train/...``), the held-out
pairs' objective, DPO loss, reward accuracy and margin, and the likelihood displacement of their
chosen and rejected completions (``heldout_pairs/...``), and the greedy accuracy on the held-out
questions with its format adherence (``heldout/...``, from the pipeline's evaluation). Epoch 0 is
the base model, measured before the first update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxdebate.coherence.config import DPOConfig
from jaxdebate.coherence.dpo import objective_loss

STOP_KEY = "heldout/accuracy"
PAIR_KEYS = {
    "loss": "loss", "dpo_loss": "dpo_loss", "accuracy": "rewards/accuracy", "margin": "rewards/margin",
    "chosen_delta": "logps/chosen_delta", "rejected_delta": "logps/rejected_delta", "nll_chosen": "nll/chosen",
    "logps_chosen": "logps/chosen", "logps_rejected": "logps/rejected",
}
TRAIN_KEYS = ("loss", "dpo_loss", "nll/chosen", "rewards/margin", "rewards/accuracy", "grad_norm",
              "logps/chosen", "logps/rejected", "logps/chosen_delta", "logps/rejected_delta")


def pair_metrics(policy_chosen: np.ndarray, policy_rejected: np.ndarray, ref_chosen: np.ndarray,
                 ref_rejected: np.ndarray, chosen_tokens: np.ndarray, cfg: DPOConfig) -> dict[str, float]:
    """The held-out pairs' ``heldout_pairs/...`` figures under the run's objective (means over pairs)."""
    _, m = objective_loss(jnp.asarray(policy_chosen), jnp.asarray(policy_rejected), jnp.asarray(ref_chosen),
                          jnp.asarray(ref_rejected), jnp.asarray(chosen_tokens), objective=cfg.objective,
                          beta=cfg.beta, rpo_alpha=cfg.rpo_alpha)
    out = {f"heldout_pairs/{name}": float(m[key]) for name, key in PAIR_KEYS.items()}
    out["heldout_pairs/n"] = int(len(policy_chosen))
    return out


def epoch_means(history: Sequence[Mapping[str, float]], epoch: int) -> dict[str, float]:
    """``train/<key>``: the mean of each update metric over the updates of ``epoch``."""
    rows = [h for h in history if int(h["epoch"]) == epoch]
    return {f"train/{k}": float(np.mean([h[k] for h in rows])) for k in TRAIN_KEYS if rows and k in rows[0]}


def best_epoch(rows: Sequence[Mapping[str, Any]], key: str = STOP_KEY) -> int | None:
    """The trained epoch (≥ 1) with the highest ``key``, the earliest on ties (fewer updates win);
    None when no trained epoch was validated."""
    scored = [(float(r[key]), -int(r["epoch"])) for r in rows if int(r["epoch"]) >= 1 and r.get(key) is not None]
    return -max(scored)[1] if scored else None


def should_stop(rows: Sequence[Mapping[str, Any]], patience: int, key: str = STOP_KEY) -> bool:
    """True once ``patience`` validated epochs have passed since the best one."""
    best = best_epoch(rows, key)
    if best is None:
        return False
    later = [r for r in rows if int(r["epoch"]) > best and r.get(key) is not None]
    return len(later) >= patience
