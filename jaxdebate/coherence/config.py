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
    with its own temperature and seed; ``sampler.top_p`` and ``sampler.max_new_tokens`` apply to all)."""

    _name: ClassVar[str] = "collect"
    arms: tuple[Arm, ...] = dataclasses.field(default_factory=default_arms)
    questions_per_batch: int = 4

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
    """Pairing rules (see :mod:`jaxdebate.coherence.pairs`)."""

    _name: ClassVar[str] = "pairs"
    quality_gap: float = 0.01
    max_correctness_pairs_per_question: int = 8
    max_coherence_pairs_per_question: int = 4
    include_probes: bool = True
    allow_truncated_chosen: bool = False

    def validate(self) -> None:
        self._at_least(0, "quality_gap", "max_correctness_pairs_per_question", "max_coherence_pairs_per_question")


@dataclasses.dataclass(frozen=True)
class DPOConfig(Section):
    """DPO optimisation. One update sees ``batch_size × grad_accumulation`` pairs."""

    _name: ClassVar[str] = "dpo"
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
        self._positive("beta", "learning_rate", "max_grad_norm")
        self._at_least(1, "epochs", "batch_size", "grad_accumulation", "length_bucket")
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
    135M model can follow: one worked example, lenient number extraction)."""

    _name: ClassVar[str] = "coherence"
    workdir: str = "runs/coherence"
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
        if not self.workdir.strip():
            self._fail("workdir", "must be a non-empty path")
