"""Experiment configuration: typed, frozen, validated dataclasses, loadable from ``configs/*.py``.

A config file is any Python file exposing ``get_config()`` (the Flax-examples convention). Command-line
overrides use dotted paths into the dataclass tree, values parsed as Python literals (or JSON, or a
bare string)::

    loss.beta=0.05   training.total_train_steps=2   shaping.params.alpha=0.3
    data.env_name_remap={'math':'math_debate'}   sampler.backend=vllm   logging.wandb=true

Every section validates itself when built and raises :class:`~jaxdebate.errors.ConfigError` naming
``section.field``; the root :class:`Config` adds the cross-field checks. Overrides rebuild the tree, so
they are validated the same way. ``to_dict``/``from_dict`` round-trip through plain types (JSON-able).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import json
import math
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from jaxdebate.errors import ConfigError
from jaxdebate.sampling.vllm_config import VLLMConfig

# ---------------------------------------------------------------------------------------------------
# Generic machinery (works on any tree of dataclasses; also used by the coherence pipeline's config).
# ---------------------------------------------------------------------------------------------------


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the raw strings
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (tp, False)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), True
    return tp, False


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def check_value(path: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp`` and return it normalised (int -> float where a
    float is expected, list -> tuple where a tuple is expected). Raises ConfigError naming ``path``."""
    inner, optional = _strip_optional(tp)
    if value is None:
        if optional or tp is Any:
            return None
        raise ConfigError(f"{path} must not be None (expected {_type_name(tp)})")
    tp = inner
    origin = typing.get_origin(tp)
    if tp is Any or isinstance(tp, str):
        return value
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{path} must be one of {list(choices)}, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path} must be a number, got {value!r}")
        if not math.isfinite(value):  # inf/nan (also 1e400) poison training and are not JSON
            raise ConfigError(f"{path} must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path} must be a string, got {value!r}")
        return value
    if origin is tuple or tp is tuple:
        if not isinstance(value, (tuple, list)):
            raise ConfigError(f"{path} must be a list/tuple, got {value!r}")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(check_value(f"{path}[{i}]", v, args[0]) for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise ConfigError(f"{path} must have {len(args)} entries, got {len(value)}")
        return tuple(value) if not args else tuple(
            check_value(f"{path}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args))
        )
    if origin in (dict, Mapping) or tp in (dict, Mapping) or origin is typing.get_origin(Mapping[str, Any]):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path} must be a mapping, got {value!r}")
        args = typing.get_args(tp)
        if len(args) == 2:
            return {
                check_value(f"{path} key", k, args[0]): check_value(f"{path}.{k}", v, args[1])
                for k, v in value.items()
            }
        return dict(value)
    if _is_dataclass_type(tp):
        if not isinstance(value, tp):
            raise ConfigError(f"{path} must be a {tp.__name__}, got {type(value).__name__}")
        return value
    return value


class Section:
    """Mixin for config sections: type-checks every field from its annotation when built.

    Subclasses set ``_name`` (the section's path, used in messages) and may define ``validate()``
    for value checks beyond the types.
    """

    _name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            value = check_value(f"{self._name}.{f.name}", getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)
        self.validate()

    def validate(self) -> None:
        """Value checks beyond the annotations; raise ConfigError naming ``section.field``."""

    def _fail(self, field: str, message: str) -> None:
        raise ConfigError(f"{self._name}.{field} {message}, got {getattr(self, field)!r}")


def to_dict(config: Any) -> dict[str, Any]:
    """The config as a plain nested dict (tuples become lists, so it is JSON-able as is)."""

    def plain(x: Any) -> Any:
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, Mapping):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x

    return plain(config)


def from_dict(cls: type, data: Mapping[str, Any], *, path: str = "") -> Any:
    """Rebuild a dataclass tree of type ``cls`` from :func:`to_dict` output; unknown keys are errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or cls.__name__} must be a mapping, got {data!r}")
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(
            f"unknown config field {where}{unknown[0]} (known fields{' of ' + path if path else ''}: "
            f"{', '.join(sorted(names))})"
        )
    kwargs = {}
    for key, value in data.items():
        tp, _ = _strip_optional(hints[key])
        sub = f"{path}.{key}" if path else key
        if _is_dataclass_type(tp) and isinstance(value, Mapping):
            value = from_dict(tp, value, path=sub)
        elif (typing.get_origin(tp) is tuple or tp is tuple) and isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"cannot build {path or cls.__name__}: {e}") from e


def parse_value(text: str) -> Any:
    """An override's value: a Python literal, else JSON (true/false/null), else the bare string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return json.loads(text)
    except ValueError:
        return text


def _coerce(value: Any, raw: str, tp: Any) -> Any:
    """Small conveniences for command-line values: ``x=None``/``x=null``, strings that look like
    numbers (``model.source=123``), lists for tuples, and ``true``/``false`` for booleans."""
    inner, optional = _strip_optional(tp)
    if raw.strip().lower() in ("none", "null") and optional:
        return None
    if inner is str and not isinstance(value, str):
        return raw
    if inner is bool and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if (typing.get_origin(inner) is tuple or inner is tuple) and isinstance(value, list):
        return tuple(value)
    return value


def _set_path(tree: dict[str, Any], cls: Any, keys: list[str], raw: str, done: list[str]) -> None:
    """Set the value at ``keys`` in the plain-dict ``tree`` of dataclass type ``cls``."""
    key = keys[0]
    where = ".".join(done + [key])
    if _is_dataclass_type(cls):
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        if key not in fields:
            section = ".".join(done) or "the config"
            raise ConfigError(
                f"unknown config field {where!r} (fields of {section}: {', '.join(sorted(fields))})"
            )
        tp = _hints(cls)[key]
        if len(keys) == 1:
            tree[key] = _coerce(parse_value(raw), raw, tp)
            return
        inner, _ = _strip_optional(tp)
        if not isinstance(tree.get(key), dict):
            raise ConfigError(f"{where} is a {type(tree.get(key)).__name__}, it has no field {keys[1]!r}")
        _set_path(tree[key], inner if _is_dataclass_type(inner) else None, keys[1:], raw, done + [key])
        return
    # a plain mapping field (e.g. shaping.params): keys are free, the owner validates them
    if len(keys) == 1:
        value = parse_value(raw)
        if isinstance(tree.get(key), str) and not isinstance(value, str):
            value = raw
        tree[key] = value
        return
    if not isinstance(tree.get(key), dict):
        raise ConfigError(f"{where} is not a mapping, it has no key {keys[1]!r}")
    _set_path(tree[key], None, keys[1:], raw, done + [key])


def apply_overrides(config: Any, overrides: Iterable[str] = ()) -> Any:
    """Apply ``section.field=value`` overrides, then rebuild and re-validate the whole tree once (so
    overrides that only make sense together, like ``peak_lr`` and ``end_lr``, can be given together)."""
    overrides = list(overrides)
    if not overrides:
        return config
    tree = to_dict(config)
    for item in overrides:
        key, sep, raw = str(item).partition("=")
        key = key.strip()
        if not sep or not key or any(not k for k in key.split(".")):
            raise ConfigError(f"override {item!r} is not of the form section.field=value")
        _set_path(tree, type(config), key.split("."), raw.strip(), [])
    return from_dict(type(config), tree)


def _module_name_for(path: Path) -> tuple[str, Path] | None:
    """``(dotted.name, root)`` when ``path`` lives in a package (directories with __init__.py)."""
    parts = [path.stem]
    parent = path.parent
    while (parent / "__init__.py").is_file():
        parts.insert(0, parent.name)
        parent = parent.parent
    return (".".join(parts), parent) if len(parts) > 1 else None


def load_config_module(path: str | Path) -> types.ModuleType:
    """Import a config file. Files inside a package (``configs/coma.py``) are imported as
    ``configs.coma`` with the package's parent on ``sys.path``, so they can import their siblings
    (``from configs import base``); a standalone file is loaded on its own."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ConfigError(f"config file not found: {path}")
    named = _module_name_for(file)
    try:
        if named is not None:
            name, root = named
            if str(root) not in sys.path:
                sys.path.insert(0, str(root))
            module = importlib.import_module(name)
            if Path(module.__file__).resolve() != file:
                raise ConfigError(
                    f"config {file} imports as {name!r}, but that name is already taken by "
                    f"{module.__file__}"
                )
            return module
        spec = importlib.util.spec_from_file_location(f"_jaxdebate_config_{file.stem}", file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a broken config file: one clear message
        raise ConfigError(f"cannot import config file {file}: {type(e).__name__}: {e}") from e


def load_config(path: str | Path, overrides: Iterable[str] = (), *, expected: type | None = None) -> Any:
    """``get_config()`` of the Python file at ``path``, with ``overrides`` applied and re-validated.

    A ``get_config()`` that raises, or returns something other than a config dataclass (an instance
    of ``expected`` when given), is a ConfigError naming the file, not a traceback.
    """
    module = load_config_module(path)
    get = getattr(module, "get_config", None)
    if not callable(get):
        raise ConfigError(f"config file {path} has no get_config() function")
    try:
        config = get()
    except ConfigError as e:
        raise ConfigError(f"get_config() of {path}: {e}") from e
    except Exception as e:  # noqa: BLE001 - a broken config file: one clear message
        raise ConfigError(f"get_config() of {path} raised {type(e).__name__}: {e}") from e
    wanted = expected.__name__ if expected is not None else "a config dataclass"
    if (expected is not None and not isinstance(config, expected)) or not (
        dataclasses.is_dataclass(config) and not isinstance(config, type)
    ):
        raise ConfigError(f"get_config() of {path} must return {wanted}, got {type(config).__name__}")
    return apply_overrides(config, overrides)


def diff(a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """``[(dotted.path, value_a, value_b)]`` for every leaf where two config trees differ."""
    out: list[tuple[str, Any, Any]] = []

    def walk(x: Any, y: Any, path: str) -> None:
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            for k in sorted(set(x) | set(y), key=str):
                walk(x.get(k, _MISSING), y.get(k, _MISSING), f"{path}.{k}" if path else str(k))
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{path}[{i}]")
        elif x != y or type(x) is not type(y):
            out.append((path, x, y))

    walk(to_dict(a), to_dict(b), "")
    return out


_MISSING = "<missing>"


def non_finite_path(tree: Any, path: str = "") -> str | None:
    """The dotted path of the first inf/nan float in a plain tree (from :func:`to_dict`), or None."""
    if isinstance(tree, float) and not math.isfinite(tree):
        return path
    items = tree.items() if isinstance(tree, Mapping) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        found = non_finite_path(value, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


def format_config(config: Any) -> str:
    """The config as indented, standard JSON (for --print-config and logs); a non-finite float
    (in a free-form mapping no annotation checks) is a ConfigError naming it, never ``Infinity``."""
    tree = to_dict(config)
    bad = non_finite_path(tree)
    if bad is not None:
        raise ConfigError(f"{bad} must be a finite number (JSON has no inf/nan)")
    return json.dumps(tree, indent=2, sort_keys=False, default=str, allow_nan=False)


# ---------------------------------------------------------------------------------------------------
# The RL experiment's own sections (data, debate, shaping and vLLM sections live with their modules).
# ---------------------------------------------------------------------------------------------------


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
        if self.rank < self._min_rank:
            self._fail("rank", f"must be >= {self._min_rank}")
        if not self.alpha > 0:
            self._fail("alpha", "must be > 0")
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

    ``dtype`` is the compute dtype (parameters and optimiser state stay float32); ``remat`` is the
    per-layer rematerialisation of the backward pass (``none``/``full``/``dots``); ``logprob_chunk`` is
    how many tokens the output head processes at once (the full logits are never materialised);
    ``lora`` with ``rank > 0`` trains an adapter on the frozen base (:class:`PolicyLoraConfig`).
    """

    _name: ClassVar[str] = "model"
    source: str = "smollm2"
    dtype: Literal["float32", "bfloat16"] = "float32"
    remat: Literal["none", "full", "dots"] = "none"
    logprob_chunk: int = 1024
    lora: PolicyLoraConfig = dataclasses.field(default_factory=PolicyLoraConfig)

    def validate(self) -> None:
        if not self.source.strip():
            self._fail("source", "must be a model source string (smollm2, tiny, a directory, ORG/NAME)")
        if self.logprob_chunk < 1:
            self._fail("logprob_chunk", "must be >= 1")


@dataclasses.dataclass(frozen=True)
class SamplerConfig(Section):
    """How debates are sampled: the backend (in-process ``jax``, a ``vllm`` server, or ``auto``: vLLM
    where it is the faster path, see :func:`jaxdebate.sampling.factory.choose_backend`), the training
    sampling distribution (``temperature``, ``top_p``; the learner's log-probs use the same
    temperature), the completion budget per turn, and the validation temperature (0 = greedy).
    ``vllm`` configures the server when ``backend='vllm'`` (see :mod:`jaxdebate.sampling.vllm_config`);
    ``fallback`` says what happens when that server cannot be reached (no ``vllm.url``, no server
    virtualenv): ``jax`` samples in-process with a warning, ``error`` stops before any compute."""

    _name: ClassVar[str] = "sampler"
    backend: Literal["auto", "jax", "vllm"] = "auto"
    fallback: Literal["jax", "error"] = "jax"
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    eval_temperature: float = 0.0
    vllm: VLLMConfig = dataclasses.field(default_factory=VLLMConfig)

    def validate(self) -> None:
        if not self.temperature > 0:
            self._fail("temperature", "must be > 0 for training (the policy gradient needs samples)")
        if not 0 < self.top_p <= 1:
            self._fail("top_p", "must be in (0, 1]")
        if self.max_new_tokens < 1:
            self._fail("max_new_tokens", "must be >= 1")
        if not self.eval_temperature >= 0:
            self._fail("eval_temperature", "must be >= 0 (0 = greedy)")


@dataclasses.dataclass(frozen=True)
class LossConfig(Section):
    """The policy-gradient objective (same for every shaping strategy).

    ``estimator``/``grouping``/``advantage_eps``: advantages from shaped rewards (DESIGN §4).
    ``clip_eps`` (and ``clip_eps_high``, default = ``clip_eps``): the PPO ratio clip against the
    learner's own log-probs before the update. ``importance_weight_cap``: the truncated importance
    weight ``min(exp(old_learner - sampler), cap)`` correcting for a lagging sampler. ``beta``: k3 KL
    to the reference policy. ``aggregation``: ``token`` (mean over all completion tokens of the
    batch) or ``sequence`` (mean over a sequence's tokens, then over sequences). ``ppo_epochs``:
    optimiser updates per sampled batch (1 = on-policy GRPO; >1 makes the clip matter).
    ``filter_zero_signal``/``filter_truncated``: drop groups whose shaped rewards are all equal and
    truncated completions.
    """

    _name: ClassVar[str] = "loss"
    estimator: Literal["grpo", "rloo"] = "grpo"
    grouping: Literal["prompt", "agent_round"] = "prompt"
    advantage_eps: float = 1e-6
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    importance_weight_cap: float = 2.0
    beta: float = 0.03
    aggregation: Literal["token", "sequence"] = "token"
    ppo_epochs: int = 1
    filter_zero_signal: bool = True
    filter_truncated: bool = True

    def validate(self) -> None:
        if not self.advantage_eps > 0:
            self._fail("advantage_eps", "must be > 0")
        if not 0 < self.clip_eps < 1:
            self._fail("clip_eps", "must be in (0, 1)")
        if self.clip_eps_high is not None and not self.clip_eps_high > 0:
            self._fail("clip_eps_high", "must be > 0")
        if not self.importance_weight_cap >= 1:
            self._fail("importance_weight_cap", "must be >= 1")
        if not self.beta >= 0:
            self._fail("beta", "must be >= 0")
        if self.ppo_epochs < 1:
            self._fail("ppo_epochs", "must be >= 1")

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
        if not self.peak_lr > 0:
            self._fail("peak_lr", "must be > 0")
        if not 0 <= self.end_lr <= self.peak_lr:
            self._fail("end_lr", f"must be in [0, peak_lr={self.peak_lr}]")
        if self.warmup_steps < 0:
            self._fail("warmup_steps", "must be >= 0")
        for name in ("b1", "b2"):
            if not 0 <= getattr(self, name) < 1:
                self._fail(name, "must be in [0, 1)")
        if not self.adam_eps > 0:
            self._fail("adam_eps", "must be > 0")
        if not self.weight_decay >= 0:
            self._fail("weight_decay", "must be >= 0")
        if not self.grad_clip >= 0:
            self._fail("grad_clip", "must be >= 0 (0 turns clipping off)")
        if self.n_gradient_accumulation_steps < 1:
            self._fail("n_gradient_accumulation_steps", "must be >= 1")


@dataclasses.dataclass(frozen=True)
class TrainingConfig(Section):
    """Batch sizes (prompts per step), run length, intervals (in training steps) and the seed.

    Each training step samples ``generations_per_prompt`` debates for each of ``train_batch_size``
    prompts; the sampler serves weights refreshed every ``export_every_steps``; the KL reference is
    hard-updated every ``hard_update_ref_every_steps``. ``max_tokens_per_microbatch`` bounds the
    learner's memory (row positions per forward/backward pass). ``packing`` lays several samples out
    per row with shared prompt prefixes stored once (same loss and gradients, fewer FLOPs;
    :mod:`jaxdebate.rl.batching`); off, each sample gets its own padded row.
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

    def validate(self) -> None:
        for name in (
            "train_batch_size", "eval_batch_size", "generations_per_prompt", "total_train_steps",
            "export_every_steps", "hard_update_ref_every_steps", "log_every_steps",
            "max_tokens_per_microbatch",
        ):
            if getattr(self, name) < 1:
                self._fail(name, "must be >= 1")
        for name in ("validation_every_steps", "checkpoint_every_steps"):
            if getattr(self, name) < 0:
                self._fail(name, "must be >= 0 (0 turns it off)")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(Section):
    """orbax checkpoints under ``<workdir>/checkpoints``: how many to keep, and resume behaviour."""

    _name: ClassVar[str] = "checkpoint"
    n_last_ckpts_to_keep: int = 2
    resume: bool = True
    save_on_interrupt: bool = True

    def validate(self) -> None:
        if self.n_last_ckpts_to_keep < 1:
            self._fail("n_last_ckpts_to_keep", "must be >= 1")


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
    """Where a run executes: locally, or on SLURM through submitit (used by the sweep tool)."""

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

    def validate(self) -> None:
        for name in ("training_devices", "sampling_devices", "cpus_per_task", "mem_gb", "time_limit_minutes"):
            if getattr(self, name) < 1:
                self._fail(name, "must be >= 1")
        if self.gpus_per_node < 0:
            self._fail("gpus_per_node", "must be >= 0")



# ---------------------------------------------------------------------------------------------------
# The root: every section, and the checks that involve more than one section.
# ---------------------------------------------------------------------------------------------------

from jaxdebate.data.config import DataConfig  # noqa: E402  (sections owned by their modules)
from jaxdebate.debate.config import DebateConfig  # noqa: E402
from jaxdebate.shaping.config import ShapingConfig  # noqa: E402


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
    "CheckpointConfig",
    "Config",
    "LaunchConfig",
    "LoggingConfig",
    "LossConfig",
    "ModelConfig",
    "OptimizerConfig",
    "SamplerConfig",
    "TrainingConfig",
    "Section",
    "apply_overrides",
    "check_value",
    "diff",
    "format_config",
    "from_dict",
    "load_config",
    "load_config_module",
    "parse_value",
    "to_dict",
]
