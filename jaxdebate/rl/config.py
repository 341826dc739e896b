"""The experiment config's learner sections: ``loss`` (the policy-gradient objective), ``optimizer``
and ``training`` (steps, batch sizes, micro-batching, validation and checkpoint cadence)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from jaxdebate.configlib import Section


@dataclasses.dataclass(frozen=True)
class LossConfig(Section):
    """The policy-gradient objective (same for every shaping strategy).

    ``estimator``/``grouping``/``advantage_eps``: advantages from shaped rewards (DESIGN §4);
    ``dr_grpo`` subtracts the group mean without dividing by the std. ``per_agent_norm``: each
    agent's turns of a group form their own group (Dr. MAS; :mod:`jaxdebate.shaping.advantages`).
    ``policy_loss``: ``ppo_clip`` (the token-level clipped ratio), ``gspo`` (one length-normalised
    ratio per sequence, clipped per sequence) or ``cispo`` (a clipped, stop-gradient importance weight
    on every token's log-prob); formulas in :mod:`jaxdebate.rl.losses`. ``clip_eps`` (and
    ``clip_eps_high``, default = ``clip_eps``): the ratio clip ``[1 - clip_eps, 1 + clip_eps_high]``
    against the learner's own log-probs before the update (for ``gspo`` on the sequence ratio, for
    ``cispo`` on the importance weight). ``importance_weight_cap``: the truncated importance
    weight ``min(exp(old_learner - sampler), cap)`` correcting for a lagging sampler. ``beta``: k3 KL
    to the reference policy. ``aggregation``: ``token`` (mean over all completion tokens of the
    batch), ``sequence`` (mean over a sequence's tokens, then over sequences) or ``sequence_sum``
    (a sequence's token sum over the constant ``sampler.max_new_tokens``, then the mean over
    sequences: Dr. GRPO's normaliser, so a token's weight does not depend on lengths). ``ppo_epochs``:
    optimiser updates per sampled batch (1 = on-policy GRPO; >1 makes the clip matter).
    ``filter_zero_signal``/``filter_truncated``: drop groups whose shaped rewards are all equal and
    truncated completions. ``truncated_as_wrong``: a turn that hit ``sampler.max_new_tokens`` counts
    as a wrong answer with no vote before shaping (with ``filter_truncated=False`` it is then trained
    on, so running past the budget is penalised instead of silently dropped).
    """

    _name: ClassVar[str] = "loss"
    estimator: Literal["grpo", "rloo", "dr_grpo"] = "grpo"
    grouping: Literal["prompt", "agent_round"] = "prompt"
    per_agent_norm: bool = False
    advantage_eps: float = 1e-6
    policy_loss: Literal["ppo_clip", "gspo", "cispo"] = "ppo_clip"
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    importance_weight_cap: float = 2.0
    beta: float = 0.03
    aggregation: Literal["token", "sequence", "sequence_sum"] = "token"
    ppo_epochs: int = 1
    filter_zero_signal: bool = True
    filter_truncated: bool = True
    truncated_as_wrong: bool = False

    def validate(self) -> None:
        self._positive("advantage_eps", "clip_eps_high")
        if not 0 < self.clip_eps < 1:
            self._fail("clip_eps", "must be in (0, 1)")
        self._at_least(1, "importance_weight_cap", "ppo_epochs")
        self._at_least(0, "beta")

    @property
    def clip_high(self) -> float:
        return self.clip_eps if self.clip_eps_high is None else self.clip_eps_high


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(Section):
    """AdamW with a warm-up then ``schedule`` decay from ``peak_lr`` to ``end_lr`` over the run.

    ``grad_clip`` is the global-norm clip (0 = off). ``n_gradient_accumulation_steps``: every training
    step's samples are split into at least this many micro-batches whose gradients are summed into
    one update (more splits = less memory, same update); see also ``training.max_tokens_per_microbatch``.
    """

    _name: ClassVar[str] = "optimizer"
    peak_lr: float = 3e-6
    end_lr: float = 3e-6
    warmup_steps: int = 0
    schedule: Literal["constant", "linear", "cosine"] = "cosine"
    b1: float = 0.9
    b2: float = 0.999
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    n_gradient_accumulation_steps: int = 1

    def validate(self) -> None:
        self._positive("peak_lr", "adam_eps")
        if not 0 <= self.end_lr <= self.peak_lr:
            self._fail("end_lr", f"must be in [0, peak_lr={self.peak_lr}]")
        self._at_least(0, "warmup_steps", "weight_decay", "grad_clip")  # grad_clip 0 turns clipping off
        self._at_least(1, "n_gradient_accumulation_steps")
        for name in ("b1", "b2"):
            if not 0 <= getattr(self, name) < 1:
                self._fail(name, "must be in [0, 1)")


@dataclasses.dataclass(frozen=True)
class TrainingConfig(Section):
    """Batch sizes (prompts per step), run length, intervals (in training steps) and the seed.

    Each training step samples ``generations_per_prompt`` debates for each of ``train_batch_size``
    prompts; the sampler serves weights refreshed every ``export_every_steps``; the KL reference is
    hard-updated every ``hard_update_ref_every_steps``. ``max_tokens_per_microbatch`` bounds the
    learner's memory (row positions per forward/backward pass). ``packing`` lays several samples out
    per row with shared prompt prefixes stored once (same loss and gradients, fewer FLOPs;
    :mod:`jaxdebate.rl.batching`); off, each sample gets its own padded row. ``split_short_rows`` puts
    a row at most half as long as its micro-batch's (by length bucket) in a micro-batch of its own
    bucket: fewer padded positions, one more micro-batch; off by default while the arithmetic-v2
    sweep runs (the gradient sum changes order: its numerics would move in the last bits). An update
    whose loss, gradient or result is non-finite is not applied; ``nonfinite_patience`` such updates in a row
    stop the run with an error naming the step and the metric; ``idle_warning_steps`` steps in a row
    without an update are reported once, with the reason (0: never). ``reuse_initial_validation``: step
    0's validation of the base model is cached and reused by every run that would compute the same
    (:mod:`jaxdebate.rl.validation_plan`). ``sample_ahead`` plays the next step's debates on a worker
    thread while this step learns, on the weights the sampler held before the step: one step
    off-policy (the loss's truncated importance weight corrects for it), and the sampler and the
    learner busy at once; it pays where they do not share the cores (a GPU learner, a vLLM server on
    other devices), and it is off in the committed configs.
    """

    _name: ClassVar[str] = "training"
    train_batch_size: int = 2
    eval_batch_size: int = 2
    generations_per_prompt: int = 4
    total_train_steps: int = 15
    validation_every_steps: int = 15
    export_every_steps: int = 5
    hard_update_ref_every_steps: int = 5
    checkpoint_every_steps: int = 15
    log_every_steps: int = 1
    seed: int = 42
    max_tokens_per_microbatch: int = 16384
    validate_at_start: bool = False
    packing: bool = True
    split_short_rows: bool = False
    nonfinite_patience: int = 3
    reuse_initial_validation: bool = True
    idle_warning_steps: int = 3
    sample_ahead: bool = False

    def validate(self) -> None:
        self._at_least(
            1, "train_batch_size", "eval_batch_size", "generations_per_prompt", "total_train_steps",
            "export_every_steps", "hard_update_ref_every_steps", "log_every_steps", "max_tokens_per_microbatch",
            "nonfinite_patience",
        )
        self._at_least(0, "validation_every_steps", "checkpoint_every_steps", "idle_warning_steps")  # 0 turns it off
        self._at_least(0, "seed")  # numpy seeds the data order and the draws with it
