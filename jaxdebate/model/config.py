"""The model's configuration: ``LlamaConfig`` (the architecture hyper-parameters of a Llama-family
model, read from / written to HF ``config.json`` dicts; frozen and hashable so it can be a static
argument of ``jax.jit``), and the experiment config's ``model`` section with its LoRA settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from jaxdebate.configlib import Section
from jaxdebate.errors import ConfigError, WeightsError

DTYPES = ("float32", "bfloat16")
# operand dtype of the layers' matmuls: "compute" = the compute dtype, "bfloat16" = rounded to bf16,
# "bfloat16_grads" = rounded to bf16 in the two gradient contractions only (the forward unrounded)
DOT_DTYPES = ("compute", "bfloat16", "bfloat16_grads")
# bf16 matmul operands are an option of a full-fine-tuning fp32 learner; why not elsewhere:
DOTS_WITH_BF16 = "must be 'compute' with model.dtype=bfloat16 (bf16 compute already rounds every matmul operand)"
DOTS_WITH_LORA = ("must be 'compute' when a LoRA adapter is trained: the adapter is merged into the kernel "
                  "before the matmul, and a bf16 merged kernel hides the adapter's small updates from the learner")
# LlamaConfig fields that say how to compute, not what the weights are
COMPUTE_FIELDS = ("dtype", "dot_dtype", "remat")
REMAT = ("none", "full", "dots")
ROPE_TYPES = ("default", "linear", "llama3")
# HF model types whose checkpoints are plain Llama (same modules, names and maths).
LLAMA_MODEL_TYPES = ("llama",)
LLAMA_ARCHITECTURES = ("LlamaForCausalLM", "LlamaModel")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Llama architecture. Parameters are always stored in float32; ``dtype`` is the compute dtype.

    ``remat`` picks per-layer rematerialisation in the backward pass: ``none`` (keep activations),
    ``full`` (recompute each layer) or ``dots`` (keep matmul outputs, recompute the element-wise rest).
    ``dot_dtype`` ``bfloat16`` rounds the operands of the layers' matmuls to bfloat16 (accumulated in
    float32; activations, norms, attention and the output head stay in ``dtype``): the bf16 GEMM rate
    of a CPU with avx512_bf16 for a learner that is float32 everywhere else. ``bfloat16_grads`` rounds
    only the operands of the gradient contractions (input and weight gradients of the projections and
    of the output head): the forward, and so every log-prob, stays exactly ``dtype``'s, and two thirds
    of the GEMM work of a train step runs at the bf16 rate.
    ``rope_type`` ``llama3`` uses ``rope_factor``, ``rope_low_freq_factor``, ``rope_high_freq_factor`` and
    ``rope_original_max_position``; ``linear`` uses ``rope_factor``.
    """

    vocab_size: int = 49152
    hidden_size: int = 576
    intermediate_size: int = 1536
    num_layers: int = 30
    num_heads: int = 9
    num_kv_heads: int = 3
    head_dim: int = 64
    rope_theta: float = 100000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 8192
    bos_token_id: int = 1
    eos_token_id: int = 2
    dtype: str = "float32"
    dot_dtype: str = "compute"
    remat: str = "none"
    rope_type: str = "default"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_position: int = 8192

    def __post_init__(self) -> None:
        positive = (
            "vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
            "num_kv_heads", "head_dim", "max_position_embeddings",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"model.{name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model.num_heads ({self.num_heads}) must be a multiple of model.num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ConfigError(f"model.head_dim must be even for rotary embeddings, got {self.head_dim}")
        if not self.rope_theta > 0:
            raise ConfigError(f"model.rope_theta must be > 0, got {self.rope_theta}")
        if not self.rms_norm_eps > 0:
            raise ConfigError(f"model.rms_norm_eps must be > 0, got {self.rms_norm_eps}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"model.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.dot_dtype not in DOT_DTYPES:
            raise ConfigError(f"model.dot_dtype must be one of {DOT_DTYPES}, got {self.dot_dtype!r}")
        if self.dot_dtype != "compute" and self.dtype == "bfloat16":
            raise ConfigError(f"model.dot_dtype {DOTS_WITH_BF16}, got {self.dot_dtype!r}")
        if self.remat not in REMAT:
            raise ConfigError(f"model.remat must be one of {REMAT}, got {self.remat!r}")
        if self.rope_type not in ROPE_TYPES:
            raise ConfigError(f"model.rope_type must be one of {ROPE_TYPES}, got {self.rope_type!r}")
        if self.rope_type != "default" and not self.rope_factor > 0:
            raise ConfigError(f"model.rope_factor must be > 0, got {self.rope_factor}")
        if self.rope_type == "llama3" and not self.rope_high_freq_factor > self.rope_low_freq_factor:
            raise ConfigError("model.rope_high_freq_factor must exceed model.rope_low_freq_factor")

    @property
    def num_params(self) -> int:
        """Number of parameters (embedding counted once when tied)."""
        d, f, hd = self.hidden_size, self.intermediate_size, self.head_dim
        attn = d * self.num_heads * hd * 2 + d * self.num_kv_heads * hd * 2
        layer = attn + 3 * d * f + 2 * d
        head = 0 if self.tie_word_embeddings else d * self.vocab_size
        return self.vocab_size * d + self.num_layers * layer + d + head

    def flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs per token at context ``seq_len`` (PaLM accounting: 2 per multiply-add of every
        matmul, output head included, plus 4·L·H·hd·T for attention scores and values)."""
        d, hd = self.hidden_size, self.head_dim
        attn = d * self.num_heads * hd * 2 + d * self.num_kv_heads * hd * 2
        per_layer = attn + 3 * d * self.intermediate_size
        matmul = 2 * (self.num_layers * per_layer + d * self.vocab_size)
        return float(matmul + 4 * self.num_layers * self.num_heads * hd * seq_len)

    # ---------------------------------------------------------------- HF config.json

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any], *, source: str = "config.json", **overrides: Any) -> LlamaConfig:
        """Build from an HF ``config.json`` dict; a non-Llama model is a WeightsError naming ``source``."""
        model_type = hf.get("model_type")
        archs = tuple(hf.get("architectures") or ())
        if model_type not in LLAMA_MODEL_TYPES or (archs and not set(archs) & set(LLAMA_ARCHITECTURES)):
            raise WeightsError(
                f"{source}: model_type={model_type!r}, architectures={list(archs)} is not a Llama-family "
                f"model (supported: model_type 'llama', {'/'.join(LLAMA_ARCHITECTURES)})"
            )
        for flag in ("attention_bias", "mlp_bias"):
            if hf.get(flag):
                raise WeightsError(f"{source}: {flag}=true is not supported (Llama without biases only)")
        act = hf.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise WeightsError(f"{source}: hidden_act={act!r} is not supported (silu only)")
        if hf.get("pretraining_tp", 1) not in (1, None):
            raise WeightsError(f"{source}: pretraining_tp={hf['pretraining_tp']} is not supported")
        try:
            hidden = int(hf["hidden_size"])
            heads = int(hf["num_attention_heads"])
            kw: dict[str, Any] = dict(
                vocab_size=int(hf["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(hf["intermediate_size"]),
                num_layers=int(hf["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(hf.get("num_key_value_heads") or heads),
                head_dim=int(hf.get("head_dim") or hidden // heads),
                rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
                tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
                max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
                bos_token_id=_first_id(hf.get("bos_token_id"), 1),
                eos_token_id=_first_id(hf.get("eos_token_id"), 2),
            )
        except KeyError as e:
            raise WeightsError(f"{source}: missing field {e.args[0]!r}") from e
        except (TypeError, ValueError) as e:
            raise WeightsError(f"{source}: invalid field value ({e})") from e
        # transformers >= 5 writes rope_parameters (theta inside); older configs rope_theta + rope_scaling.
        # Like transformers, a non-empty rope_scaling wins.
        params = hf.get("rope_parameters") or {}
        rope = hf.get("rope_scaling") or params
        theta = hf.get("rope_theta") or params.get("rope_theta") or rope.get("rope_theta") or 10000.0
        kw["rope_theta"] = float(theta)
        rope_type = rope.get("rope_type", rope.get("type", "default")) or "default"
        if rope_type not in ROPE_TYPES:
            raise WeightsError(
                f"{source}: rope type {rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)})"
            )
        kw["rope_type"] = rope_type
        if rope_type in ("linear", "llama3"):
            kw["rope_factor"] = float(rope.get("factor", 1.0))
        if rope_type == "llama3":
            kw["rope_low_freq_factor"] = float(rope.get("low_freq_factor", 1.0))
            kw["rope_high_freq_factor"] = float(rope.get("high_freq_factor", 4.0))
            kw["rope_original_max_position"] = int(
                rope.get("original_max_position_embeddings", kw["max_position_embeddings"])
            )
        kw.update(overrides)
        try:
            return cls(**kw)
        except ConfigError as e:
            raise WeightsError(f"{source}: {e}") from e

    def to_hf(self) -> dict[str, Any]:
        """An HF ``config.json`` dict for ``LlamaForCausalLM`` (transformers and vLLM load it)."""
        hf: dict[str, Any] = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "mlp_bias": False,
            "pretraining_tp": 1,
            "initializer_range": 0.02,
            "use_cache": True,
        }
        if self.rope_type == "default":
            hf["rope_scaling"] = None
        else:
            scaling: dict[str, Any] = {"rope_type": self.rope_type, "factor": self.rope_factor}
            if self.rope_type == "llama3":
                scaling.update(
                    low_freq_factor=self.rope_low_freq_factor,
                    high_freq_factor=self.rope_high_freq_factor,
                    original_max_position_embeddings=self.rope_original_max_position,
                )
            hf["rope_scaling"] = scaling
        return hf


def _first_id(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, (list, tuple)):
        return int(value[0]) if value else default
    return int(value)


#: LoRA-adaptable modules by their HF names (every linear layer of a Llama block).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class LoraConfig(Section):
    """LoRA adapter: rank ``r``, scaling ``alpha / r``, target modules by their HF names
    (:mod:`jaxdebate.model.lora`). The coherence pipeline's ``lora`` section."""

    _name: ClassVar[str] = "lora"
    rank: int = 16
    alpha: float = 32.0
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    _min_rank: ClassVar[int] = 1

    def validate(self) -> None:
        self._at_least(self._min_rank, "rank")
        self._positive("alpha")
        unknown = sorted(set(self.targets) - set(LORA_TARGETS))
        if not self.targets or unknown or len(set(self.targets)) != len(self.targets):
            self._fail("targets", f"must be distinct module names from {list(LORA_TARGETS)}")

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


@dataclasses.dataclass(frozen=True)
class PolicyLoraConfig(LoraConfig):
    """``model.lora``: train a LoRA adapter on the frozen base instead of every weight (LoRA-GRPO).
    ``rank`` 0 (the default) is off: full fine-tuning."""

    _name: ClassVar[str] = "model.lora"
    _min_rank: ClassVar[int] = 0
    rank: int = 0


@dataclasses.dataclass(frozen=True)
class ModelConfig(Section):
    """Which policy to train (a source string, see :mod:`jaxdebate.model.sources`) and how to compute.

    ``dtype`` is the compute dtype (parameters and optimiser state stay float32); ``dot_dtype``
    ``bfloat16`` rounds the learner's layer-matmul operands to bfloat16 (f32 accumulation; the JAX
    sampler and validation keep ``dtype``'s matmuls, so the sampler/learner log-prob mismatch the loss
    corrects is what it costs: in RL at lr 3e-5 it grew from ~0.003 to up to 0.39 nats per token after
    the first update, as the rounding hides updates smaller than a bf16 step; full fine-tuning at
    ``dtype=float32`` only; off by default; figures in bench/README "bf16 dots: a faster step, and a
    learner that drifts from its sampler"); ``dot_dtype`` ``bfloat16_grads`` rounds only the operands of
    the gradient contractions (projections and output head): the learner's forward and log-probs stay
    ``dtype``'s exactly, and the updates carry the rounding (~4e-3 relative in the gradient; off by
    default; figures in bench/README "bf16 residuals as their bits"); ``remat`` is the per-layer
    rematerialisation of the backward pass (``none``/``full``/``dots``); ``logprob_chunk`` is how many
    tokens the output head processes at once (the full logits are never materialised); ``lora`` with
    ``rank > 0`` trains an adapter on the frozen base (:class:`PolicyLoraConfig`).
    """

    _name: ClassVar[str] = "model"
    source: str = "smollm2"
    dtype: Literal["float32", "bfloat16"] = "float32"
    dot_dtype: Literal["compute", "bfloat16", "bfloat16_grads"] = "compute"
    remat: Literal["none", "full", "dots"] = "none"
    logprob_chunk: int = 1024
    lora: PolicyLoraConfig = dataclasses.field(default_factory=PolicyLoraConfig)

    def validate(self) -> None:
        if not self.source.strip():
            self._fail("source", "must be a model source string (smollm2, tiny, a directory, ORG/NAME)")
        self._at_least(1, "logprob_chunk")
        if self.dot_dtype != "compute" and self.dtype == "bfloat16":
            self._fail("dot_dtype", DOTS_WITH_BF16)
        if self.dot_dtype == "bfloat16" and self.lora.rank > 0:
            self._fail("dot_dtype", DOTS_WITH_LORA)
