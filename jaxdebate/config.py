"""The experiment configuration (DESIGN §7): the root :class:`Config` assembling every section.

Each section lives with the package that uses it (``model``: :mod:`jaxdebate.model.config`, ``sampler``:
:mod:`jaxdebate.sampling.config`, ``loss``/``optimizer``/``training``: :mod:`jaxdebate.rl.config`,
``data``, ``debate``, ``shaping``: their packages' ``config`` modules); the run-level sections
(``checkpoint``, ``logging``, ``launch``) are here. The generic machinery (type checks, ``--set``
overrides, ``load_config``, ``to_dict``/``from_dict``) is :mod:`jaxdebate.configlib`; this module
exports the root and every section, so a config file imports its types from one place.

Every section validates itself when built and raises :class:`~jaxdebate.errors.ConfigError` naming
``section.field``; the root :class:`Config` adds the cross-field checks.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from jaxdebate.configlib import Section, _hints, check_value
from jaxdebate.data.config import DataConfig
from jaxdebate.debate.config import DebateConfig
from jaxdebate.debate.envs import env_names
from jaxdebate.errors import ConfigError
from jaxdebate.model.config import LORA_TARGETS, LoraConfig, ModelConfig, PolicyLoraConfig
from jaxdebate.rl.config import LossConfig, OptimizerConfig, TrainingConfig
from jaxdebate.sampling.config import SamplerConfig
from jaxdebate.shaping.config import ShapingConfig


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(Section):
    """orbax checkpoints under ``<workdir>/checkpoints``: how many to keep, and resume behaviour
    (``resume=False`` refuses a workdir that holds checkpoints, as ``launch --no-resume`` does)."""

    _name: ClassVar[str] = "checkpoint"
    n_last_ckpts_to_keep: int = 2
    resume: bool = True
    save_on_interrupt: bool = True

    def validate(self) -> None:
        self._at_least(1, "n_last_ckpts_to_keep")


@dataclasses.dataclass(frozen=True)
class LoggingConfig(Section):
    """Metric sinks: JSONL always (``<workdir>/metrics.jsonl``), TensorBoard, and W&B when ``wandb``."""

    _name: ClassVar[str] = "logging"
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "multiagent-debate-rl"
    wandb_entity: str | None = None
    wandb_mode: Literal["offline", "online"] = "offline"
    run_name: str | None = None
    progress_bar: bool = True

    def validate(self) -> None:
        if self.wandb and not self.wandb_project.strip():
            self._fail("wandb_project", "must be set when logging.wandb is true")


@dataclasses.dataclass(frozen=True)
class LaunchConfig(Section):
    """Where a run executes: locally, or on SLURM through submitit. ``executor`` is read by the sweep
    tool (``launch/sweep.py``, unless its ``--executor`` says otherwise); ``python -m jaxdebate.launch``
    runs where it is started.

    ``training_devices`` is the learner's global device count (all processes of a multi-process run);
    ``sampling_devices`` are process 0's devices for the in-process sampler. On SLURM a run spans
    ``nodes`` x ``tasks_per_node`` tasks, one training process each (``jax.distributed``), each task
    pinned to ``gpus_per_node / tasks_per_node`` GPUs. ``deterministic_gpu_ops`` runs XLA's GPU
    reductions in a fixed order (``--xla_gpu_deterministic_ops``), so one seed repeats on a GPU as it does
    on a CPU, at some learner time (bench/README, fourth lease); it does nothing on a CPU.
    """

    _name: ClassVar[str] = "launch"
    executor: Literal["local", "slurm"] = "local"
    partition: str = "gpu_1"
    priority: str = "dev-low"
    qos: str | None = None
    account: str | None = None
    training_devices: int = 1
    sampling_devices: int = 1
    gpus_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: int = 64
    time_limit_minutes: int = 240
    nodes: int = 1
    tasks_per_node: int = 1
    deterministic_gpu_ops: bool = True

    def validate(self) -> None:
        self._at_least(1, "training_devices", "sampling_devices", "cpus_per_task", "mem_gb", "time_limit_minutes",
                       "nodes", "tasks_per_node")
        self._at_least(0, "gpus_per_node")
        if self.gpus_per_node % self.tasks_per_node:
            self._fail("tasks_per_node", f"must divide launch.gpus_per_node={self.gpus_per_node} (GPUs per task)")



@dataclasses.dataclass(frozen=True)
class Config:
    """One experiment: every setting of a training run (DESIGN §7). Build it in a ``configs/*.py``
    file's ``get_config()``; the five strategy configs differ only in ``shaping``."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    debate: DebateConfig = dataclasses.field(default_factory=DebateConfig)
    sampler: SamplerConfig = dataclasses.field(default_factory=SamplerConfig)
    shaping: ShapingConfig = dataclasses.field(default_factory=ShapingConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
    launch: LaunchConfig = dataclasses.field(default_factory=LaunchConfig)

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            check_value(f.name, getattr(self, f.name), hints[f.name])
        unknown = sorted(self.data.environments() - set(env_names()))
        if unknown:
            raise ConfigError(
                f"data.env_name_remap / data.validation_env(s) / data.transfer_env: environment(s) {unknown} "
                f"are not registered; registered: {', '.join(env_names())}"
            )
        g = self.training.generations_per_prompt
        try:
            self.shaping.check_group_size(g)
        except ConfigError as e:
            raise ConfigError(f"{e} (training.generations_per_prompt={g})") from None
        if self.sampler.max_new_tokens >= self.debate.max_sequence_length:
            raise ConfigError(
                f"sampler.max_new_tokens ({self.sampler.max_new_tokens}) must be smaller than "
                f"debate.max_sequence_length ({self.debate.max_sequence_length}): prompts need room"
            )
        if self.loss.estimator == "rloo" and g < 2:
            raise ConfigError(
                "loss.estimator='rloo' needs training.generations_per_prompt >= 2 (a leave-one-out "
                f"baseline over one rollout is undefined), got {g}"
            )
        if self.optimizer.warmup_steps > self.training.total_train_steps:
            raise ConfigError(
                f"optimizer.warmup_steps ({self.optimizer.warmup_steps}) exceeds "
                f"training.total_train_steps ({self.training.total_train_steps})"
            )

    @property
    def samples_per_step(self) -> int:
        """Upper bound on training samples (turns) per step: prompts x rollouts x agents x rounds."""
        t, d = self.training, self.debate
        return t.train_batch_size * t.generations_per_prompt * d.num_agents * d.num_rounds


__all__ = [
    "LORA_TARGETS",
    "CheckpointConfig",
    "Config",
    "DataConfig",
    "DebateConfig",
    "LaunchConfig",
    "LoggingConfig",
    "LoraConfig",
    "LossConfig",
    "ModelConfig",
    "OptimizerConfig",
    "PolicyLoraConfig",
    "SamplerConfig",
    "ShapingConfig",
    "TrainingConfig",
]
