"""Typed, frozen configuration of the coherence DPO pipeline, validated when built.

Sections: ``model``, ``sampler`` and ``logging`` (shared with the RL experiment, :mod:`jaxdebate.config`;
of ``sampler`` the pipeline uses ``backend``, ``top_p``, ``max_new_tokens`` and ``eval_temperature`` —
``temperature`` is ignored because every arm sets its own), ``data``,
``collect`` (arms and sampling), ``scores``, ``pairs``, ``lora``, ``dpo``, ``eval``. Every section
type-checks its fields (the :class:`jaxdebate.config.Section` mixin) and raises ``ConfigError`` naming
``section.field``; ``jaxdebate.configlib.to_dict`` is the serialised form and ``load_config`` reads
``configs/coherence.py`` with ``section.field=value`` overrides.
"""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar, Literal

from jaxdebate.coherence.arms import Arm, default_arms, validate_arms
from jaxdebate.config import LoggingConfig, LoraConfig, ModelConfig, SamplerConfig
from jaxdebate.configlib import Section
from jaxdebate.errors import ConfigError
from jaxdebate.model.config import DOTS_WITH_LORA


@dataclasses.dataclass(frozen=True)
class DataConfig(Section):
    """Training questions (first ``n_questions`` of ``train``) and evaluation items (``eval``), each a
    dataset name known to :func:`jaxdebate.data.load_items` or a JSONL path."""

    _name: ClassVar[str] = "data"
    train: str = "gsm8k_train"
    n_questions: int = 500
    eval: str = "gsm8k_platinum"
    eval_limit: int | None = None

    def validate(self) -> None:
        self._at_least(1, "n_questions", "eval_limit")


@dataclasses.dataclass(frozen=True)
class CollectConfig(Section):
    """The arms; ``questions_per_batch × len(arms)`` prompts go to the sampler in one call (each arm
    with its own temperature and seed; ``sampler.top_p`` and ``sampler.max_new_tokens`` apply to all).

    ``canonical_twins``: also sample every arm under the canonical (persona-free, untransformed) prompt
    with the arm's temperature and seed — the texts ``pairs.source="canonical"`` trains on (issue 28).
    ``rollouts``: the rollouts file (empty: ``WORKDIR/rollouts.jsonl``); variants that point at one
    file share one collection (same questions, same samples)."""

    _name: ClassVar[str] = "collect"
    arms: tuple[Arm, ...] = dataclasses.field(default_factory=default_arms)
    questions_per_batch: int = 4
    canonical_twins: bool = False
    rollouts: str = ""

    def __post_init__(self) -> None:
        arms = self.arms if isinstance(self.arms, (tuple, list)) else ()
        object.__setattr__(self, "arms", tuple(Arm(**a) if isinstance(a, dict) else a for a in arms) or self.arms)
        super().__post_init__()

    def validate(self) -> None:
        validate_arms(self.arms)
        self._at_least(1, "questions_per_batch")


@dataclasses.dataclass(frozen=True)
class ScoreConfig(Section):
    """Weights of the score formulas (see :mod:`jaxdebate.coherence.scores`)."""

    _name: ClassVar[str] = "scores"
    path_length_weight: float = 0.4
    conciseness_weight: float = 0.4
    coherence_weight: float = 0.2

    def validate(self) -> None:
        for name in ("path_length_weight", "conciseness_weight"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                self._fail(name, "must be in [0, 1]")
        self._at_least(0, "coherence_weight")


@dataclasses.dataclass(frozen=True)
class PairConfig(Section):
    """Pairing rules (see :mod:`jaxdebate.coherence.pairs`).

    ``kind``: which pairs to keep (``correctness``, ``coherence`` or ``both``). ``source``: ``arms``
    pairs the texts sampled under the arms' persona prompts (DESIGN §8); ``canonical`` pairs their
    canonical-prompt twins (``collect.canonical_twins``), the texts the policy itself produces for
    the prompt DPO trains on. A coherence pair needs a quality gap above ``max(quality_gap,
    gap_noise_z × σ)``, σ the standard error of a gap measured from the two probes' disagreement
    (:func:`jaxdebate.coherence.pairs.gap_noise`; 0 turns the measured part off). ``heldout_fraction``
    of the questions (chosen by ``split_seed``) are held out: their pairs and questions validate
    training every epoch and never train."""

    _name: ClassVar[str] = "pairs"
    quality_gap: float = 0.01
    max_correctness_pairs_per_question: int = 8
    max_coherence_pairs_per_question: int = 4
    include_probes: bool = True
    allow_truncated_chosen: bool = False
    kind: Literal["correctness", "coherence", "both"] = "both"
    source: Literal["arms", "canonical"] = "arms"
    gap_noise_z: float = 0.0
    heldout_fraction: float = 0.0
    split_seed: int = 0

    def validate(self) -> None:
        self._at_least(0, "quality_gap", "max_correctness_pairs_per_question", "max_coherence_pairs_per_question",
                       "gap_noise_z")
        if not 0.0 <= self.heldout_fraction < 1.0:
            self._fail("heldout_fraction", "must be in [0, 1)")


@dataclasses.dataclass(frozen=True)
class DPOConfig(Section):
    """Preference training. One update sees ``batch_size × grad_accumulation`` pairs.

    ``objective``: ``dpo`` (sigmoid DPO), ``rpo`` (DPO + ``rpo_alpha`` × the chosen completion's
    per-token NLL) or ``sft`` (the chosen completion's per-token NLL only; same pairs, order and number
    of updates, so it is the like-for-like baseline). ``seed`` fixes the adapter's initialisation and
    the pair order. With held-out questions (``pairs.heldout_fraction``) every epoch is validated;
    ``early_stopping`` then stops after ``patience`` epochs without a better held-out greedy accuracy
    and exports the best epoch's adapter."""

    _name: ClassVar[str] = "dpo"
    objective: Literal["dpo", "rpo", "sft"] = "dpo"
    rpo_alpha: float = 1.0
    early_stopping: bool = False
    patience: int = 1
    beta: float = 0.1
    learning_rate: float = 5e-5
    epochs: int = 3
    batch_size: int = 2
    grad_accumulation: int = 2
    schedule: Literal["constant", "linear", "cosine"] = "linear"
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    max_length: int = 1024
    length_bucket: int = 64
    seed: int = 42

    def validate(self) -> None:
        self._positive("beta", "learning_rate", "max_grad_norm", "rpo_alpha")
        self._at_least(1, "epochs", "batch_size", "grad_accumulation", "length_bucket", "patience")
        self._at_least(0, "weight_decay")
        self._at_least(16, "max_length")
        if not 0.0 <= self.warmup_ratio < 1.0:
            self._fail("warmup_ratio", "must be in [0, 1)")


@dataclasses.dataclass(frozen=True)
class EvalConfig(Section):
    """Evaluation of the base model and base + adapter (``sampler.eval_temperature``, default greedy;
    ``sampler.max_new_tokens``), ``batch_size`` questions per sampler call, written to ``WORKDIR/dir``
    (evaluate on a second dataset with ``--set data.eval=... eval.dir=eval_other``)."""

    _name: ClassVar[str] = "eval"
    batch_size: int = 16
    dir: str = "eval"

    def validate(self) -> None:
        self._at_least(1, "batch_size")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.dir) or self.dir in (".", ".."):
            self._fail("dir", "must be one directory name inside the workdir (letters, digits, _ . -)")


@dataclasses.dataclass(frozen=True)
class CoherenceConfig(Section):
    """The whole pipeline. ``workdir`` holds every artefact (the layout is listed in
    :mod:`jaxdebate.coherence.pipeline`). ``protocol`` is how every prompt (arms, DPO pairs,
    evaluation) asks for the answer and how it is extracted (:class:`~jaxdebate.coherence.arms.AnswerFormat`):
    ``seed`` (the original 'Answer: <number>' instruction) or ``answer_line`` (the debate protocol a
    135M model can follow: one worked example, lenient number extraction). ``variant`` labels the run
    in multi-run reports (:mod:`jaxdebate.coherence.report`; empty: named from its settings)."""

    _name: ClassVar[str] = "coherence"
    workdir: str = "runs/coherence"
    variant: str = ""
    protocol: Literal["seed", "answer_line"] = "seed"
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    sampler: SamplerConfig = dataclasses.field(default_factory=lambda: SamplerConfig(max_new_tokens=384))
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    collect: CollectConfig = dataclasses.field(default_factory=CollectConfig)
    scores: ScoreConfig = dataclasses.field(default_factory=ScoreConfig)
    pairs: PairConfig = dataclasses.field(default_factory=PairConfig)
    lora: LoraConfig = dataclasses.field(default_factory=LoraConfig)
    dpo: DPOConfig = dataclasses.field(default_factory=DPOConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=lambda: LoggingConfig(wandb_project="coherence-dpo"))

    @property
    def answer_format(self):
        from jaxdebate.coherence.arms import AnswerFormat

        return AnswerFormat.named(self.protocol)

    def validate(self) -> None:
        if self.model.lora.enabled:
            raise ConfigError("model.lora is the GRPO learner's adapter; the coherence pipeline's adapter "
                              "is configured in the lora section (lora.rank, lora.alpha, lora.targets)")
        if self.model.dot_dtype != "compute":  # the pipeline always trains a LoRA adapter
            raise ConfigError(f"model.dot_dtype {DOTS_WITH_LORA}, got {self.model.dot_dtype!r}")
        if not self.workdir.strip():
            self._fail("workdir", "must be a non-empty path")
        if self.variant and not re.fullmatch(r"[A-Za-z0-9_.+-]+", self.variant):
            raise ConfigError(f"variant must be letters, digits and _ . + - (a file name), got {self.variant!r}")
        if self.pairs.source == "canonical" and not self.collect.canonical_twins:
            raise ConfigError("pairs.source=canonical pairs the canonical-prompt twins: set collect.canonical_twins=true")
        if self.dpo.early_stopping and self.pairs.heldout_fraction == 0:
            raise ConfigError("dpo.early_stopping needs held-out questions: set pairs.heldout_fraction > 0")
