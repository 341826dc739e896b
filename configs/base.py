"""Shared settings of the five-strategy experiment (DESIGN §7; the seeds' values).

SmolLM2-135M-Instruct on MATH-500 debates (3 agents, 2 rounds), 1 training and 1 sampling device.
Every strategy config is ``base.get_config(shaping=...)``: nothing else may differ between them.
"""

from __future__ import annotations

from jaxdebate.config import (
    CheckpointConfig,
    Config,
    LaunchConfig,
    LoggingConfig,
    LossConfig,
    ModelConfig,
    OptimizerConfig,
    SamplerConfig,
    TrainingConfig,
)
from jaxdebate.data import DataConfig
from jaxdebate.debate.config import DebateConfig
from jaxdebate.shaping import ShapingConfig

# --- the seeds' values (SmolLM-135M profile and the sweep's shared constants)
MODEL_SOURCE = "smollm2"  # SmolLM2-135M-Instruct (bundled GGUF); any HF dir or repo id works
NUM_TRAINING_DEVICES = 1
NUM_SAMPLING_DEVICES = 1
MAX_SEQUENCE_LENGTH = 2048
TRAIN_BATCH_SIZE = 2
EVAL_BATCH_SIZE = 2
TOTAL_TRAIN_STEPS = 15
LEARNING_RATE = 3e-6  # peak_lr == end_lr
KL_BETA = 0.03
GENERATIONS_PER_PROMPT = 4
EXPORT_EVERY_STEPS = 5
HARD_UPDATE_REF_EVERY_STEPS = 5
SEED = 42
N_GRADIENT_ACCUMULATION_STEPS = 1
VALIDATION_EVERY_STEPS = 15
CHECKPOINT_EVERY_STEPS = 15
N_LAST_CKPTS_TO_KEEP = 2
ENV_NAME_REMAP = {"math": "math_debate"}
TRAIN_DATA = "math500"  # resolved by jaxdebate.data (a .jsonl path works too)
WANDB_PROJECT = "multiagent-debate-rl"
PRIORITY = "dev-low"
PARTITION = f"gpu_{NUM_TRAINING_DEVICES}"

# --- shared choices of ours (the seeds do not fix them)
# the design's sampler: a vLLM server fed exported weights (scripts/install_vllm.sh makes .venv-vllm);
# without it the run samples in-process with the JAX sampler (sampler.fallback) and says so
SAMPLER_BACKEND = "vllm"
NUM_AGENTS = 3
NUM_ROUNDS = 2
VALIDATION_SIZE = 50
MAX_NEW_TOKENS = 512
TEMPERATURE = 1.0
# learner memory: padded tokens per forward/backward pass, with per-layer rematerialisation
MAX_TOKENS_PER_MICROBATCH = 8192
REMAT = "full"


def get_config(shaping: ShapingConfig | None = None) -> Config:
    """The shared config, with ``shaping`` (default: identity) as the only free section."""
    return Config(
        model=ModelConfig(source=MODEL_SOURCE, dtype="float32", remat=REMAT, logprob_chunk=1024),
        data=DataConfig(
            train=TRAIN_DATA,
            validation=None,
            validation_size=VALIDATION_SIZE,
            holdout_seed=0,
            env_name_remap=dict(ENV_NAME_REMAP),
            limit=None,
        ),
        debate=DebateConfig(
            num_agents=NUM_AGENTS,
            num_rounds=NUM_ROUNDS,
            early_stop_on_consensus=False,
            max_sequence_length=MAX_SEQUENCE_LENGTH,
        ),
        sampler=SamplerConfig(
            backend=SAMPLER_BACKEND,
            fallback="jax",
            temperature=TEMPERATURE,
            top_p=1.0,
            max_new_tokens=MAX_NEW_TOKENS,
            eval_temperature=0.0,
        ),
        shaping=shaping if shaping is not None else ShapingConfig("identity", {}),
        loss=LossConfig(
            estimator="grpo",
            grouping="prompt",
            advantage_eps=1e-6,
            clip_eps=0.2,
            clip_eps_high=None,
            importance_weight_cap=2.0,
            beta=KL_BETA,
            aggregation="token",
            ppo_epochs=1,
            filter_zero_signal=True,
            filter_truncated=True,
        ),
        optimizer=OptimizerConfig(
            peak_lr=LEARNING_RATE,
            end_lr=LEARNING_RATE,
            warmup_steps=0,
            schedule="constant",
            grad_clip=1.0,
            n_gradient_accumulation_steps=N_GRADIENT_ACCUMULATION_STEPS,
        ),
        training=TrainingConfig(
            train_batch_size=TRAIN_BATCH_SIZE,
            eval_batch_size=EVAL_BATCH_SIZE,
            generations_per_prompt=GENERATIONS_PER_PROMPT,
            total_train_steps=TOTAL_TRAIN_STEPS,
            validation_every_steps=VALIDATION_EVERY_STEPS,
            export_every_steps=EXPORT_EVERY_STEPS,
            hard_update_ref_every_steps=HARD_UPDATE_REF_EVERY_STEPS,
            checkpoint_every_steps=CHECKPOINT_EVERY_STEPS,
            log_every_steps=1,
            seed=SEED,
            max_tokens_per_microbatch=MAX_TOKENS_PER_MICROBATCH,
        ),
        checkpoint=CheckpointConfig(n_last_ckpts_to_keep=N_LAST_CKPTS_TO_KEEP),
        logging=LoggingConfig(tensorboard=True, wandb=False, wandb_project=WANDB_PROJECT),
        launch=LaunchConfig(
            executor="local",
            partition=PARTITION,
            priority=PRIORITY,
            training_devices=NUM_TRAINING_DEVICES,
            sampling_devices=NUM_SAMPLING_DEVICES,
            gpus_per_node=NUM_TRAINING_DEVICES + NUM_SAMPLING_DEVICES,
        ),
    )
