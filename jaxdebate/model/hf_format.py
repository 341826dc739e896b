"""The HF checkpoint format of the Llama parameter tree: tensor names and shapes, assembling the tree
from HF-named tensors, reading ``config.json`` + ``*.safetensors`` directories and writing them back as
a standard ``LlamaForCausalLM`` that transformers and vLLM load.

Every failure (missing or corrupt file, non-Llama config, missing tensor, shape mismatch) is a single
WeightsError naming the file and the tensor.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdebate.errors import ConfigError, WeightsError
from jaxdebate.model.config import LlamaConfig
from jaxdebate.model.llama import Params

# (tree path under "layers", HF module name, is a [out, in] matrix that we store transposed)
LAYER_TENSORS = (
    (("input_layernorm", "scale"), "input_layernorm", False),
    (("self_attn", "q_proj", "kernel"), "self_attn.q_proj", True),
    (("self_attn", "k_proj", "kernel"), "self_attn.k_proj", True),
    (("self_attn", "v_proj", "kernel"), "self_attn.v_proj", True),
    (("self_attn", "o_proj", "kernel"), "self_attn.o_proj", True),
    (("post_attention_layernorm", "scale"), "post_attention_layernorm", False),
    (("mlp", "gate_proj", "kernel"), "mlp.gate_proj", True),
    (("mlp", "up_proj", "kernel"), "mlp.up_proj", True),
    (("mlp", "down_proj", "kernel"), "mlp.down_proj", True),
)
_IGNORED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


# ------------------------------------------------------------------------------------------ shapes


def _hf_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """HF tensor name (without the ``model.`` prefix) -> HF shape, for one config."""
    d, f, hd = config.hidden_size, config.intermediate_size, config.head_dim
    qd, kvd = config.num_heads * hd, config.num_kv_heads * hd
    per_layer = {
        "input_layernorm": (d,),
        "self_attn.q_proj": (qd, d),
        "self_attn.k_proj": (kvd, d),
        "self_attn.v_proj": (kvd, d),
        "self_attn.o_proj": (d, qd),
        "post_attention_layernorm": (d,),
        "mlp.gate_proj": (f, d),
        "mlp.up_proj": (f, d),
        "mlp.down_proj": (d, f),
    }
    shapes = {"embed_tokens.weight": (config.vocab_size, d), "norm.weight": (d,)}
    for i in range(config.num_layers):
        for name, shape in per_layer.items():
            shapes[f"layers.{i}.{name}.weight"] = shape
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, d)
    return shapes


def _canonical(name: str) -> str:
    return name[len("model."):] if name.startswith("model.") else name


def _hf_name(canonical: str) -> str:
    return canonical if canonical.startswith("lm_head.") else "model." + canonical


# ------------------------------------------------------------------------------------------ assembly


def params_from_tensors(
    config: LlamaConfig,
    names: Iterable[str],
    get: Callable[[str], np.ndarray],
    where: Callable[[str], str] = lambda name: "checkpoint",
) -> Params:
    """Assemble the parameter tree from HF-named tensors.

    ``names`` are the available HF tensor names, ``get(name)`` reads one, ``where(name)`` names its file
    (for error messages). Missing, unexpected and mis-shaped tensors raise WeightsError.
    """
    expected = _hf_shapes(config)
    available: dict[str, str] = {}
    for name in names:
        canonical = _canonical(name)
        if _IGNORED.search(canonical) or (canonical == "lm_head.weight" and config.tie_word_embeddings):
            continue
        if canonical not in expected:
            raise WeightsError(f"unexpected tensor {name!r} in {where(name)} (not part of a Llama model)")
        available[canonical] = name
    missing = [n for n in expected if n not in available]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise WeightsError(f"missing tensor {_hf_name(missing[0])!r}{more} in {where(missing[0])}")

    def read(canonical: str) -> np.ndarray:
        name = available[canonical]
        try:
            array = np.asarray(get(name))
        except WeightsError:
            raise
        except Exception as e:  # noqa: BLE001 - a corrupt tensor can fail in many ways
            raise WeightsError(f"cannot read tensor {name!r} from {where(name)}: {e}") from e
        if tuple(array.shape) != expected[canonical]:
            raise WeightsError(
                f"tensor {name!r} in {where(name)} has shape {tuple(array.shape)}, expected "
                f"{expected[canonical]} for this config"
            )
        return array

    n_layers = config.num_layers
    layers: dict[str, Any] = {}
    for path, module, transposed in LAYER_TENSORS:
        first = read(f"layers.0.{module}.weight")
        shape = first.shape[::-1] if transposed else first.shape
        stacked = np.empty((n_layers, *shape), np.float32)
        for i in range(n_layers):
            w = first if i == 0 else read(f"layers.{i}.{module}.weight")
            np.copyto(stacked[i], w.T if transposed else w, casting="unsafe")
        node = layers
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = stacked
    tree: Params = {
        "embed_tokens": {"embedding": read("embed_tokens.weight").astype(np.float32)},
        "layers": layers,
        "norm": {"scale": read("norm.weight").astype(np.float32)},
    }
    if not config.tie_word_embeddings:
        tree["lm_head"] = {"kernel": np.ascontiguousarray(read("lm_head.weight").astype(np.float32).T)}
    return jax.tree.map(jnp.asarray, tree)


def hf_state_dict(params: Params, config: LlamaConfig, dtype: str = "float32") -> dict[str, np.ndarray]:
    """The parameter tree as HF-named numpy arrays (``[out, in]`` matrices) in ``dtype``."""
    np_dtype = _export_dtype(dtype)
    converted = _to_hf_layout(params, jnp.dtype(np_dtype))
    converted = jax.device_get(converted)
    out: dict[str, np.ndarray] = {"model.embed_tokens.weight": converted["embed_tokens"]}
    for path, module, _ in LAYER_TENSORS:
        node = converted["layers"]
        for key in path:
            node = node[key]
        for i in range(config.num_layers):
            out[f"model.layers.{i}.{module}.weight"] = node[i]
    out["model.norm.weight"] = converted["norm"]
    if not config.tie_word_embeddings:
        out["lm_head.weight"] = converted["lm_head"]
    return out


@functools.partial(jax.jit, static_argnums=1)
def _to_hf_layout(params: Params, dtype: jnp.dtype) -> dict[str, Any]:
    layers = params["layers"]

    def mat(x):  # [L, in, out] -> [L, out, in]
        return jnp.swapaxes(x, -1, -2).astype(dtype)

    out = {
        "embed_tokens": params["embed_tokens"]["embedding"].astype(dtype),
        "norm": params["norm"]["scale"].astype(dtype),
        "layers": {
            "input_layernorm": {"scale": layers["input_layernorm"]["scale"].astype(dtype)},
            "post_attention_layernorm": {"scale": layers["post_attention_layernorm"]["scale"].astype(dtype)},
            "self_attn": {k: {"kernel": mat(v["kernel"])} for k, v in layers["self_attn"].items()},
            "mlp": {k: {"kernel": mat(v["kernel"])} for k, v in layers["mlp"].items()},
        },
    }
    if "lm_head" in params:
        out["lm_head"] = params["lm_head"]["kernel"].T.astype(dtype)
    return out


def _export_dtype(dtype: str) -> Any:
    if dtype == "float32":
        return np.float32
    if dtype == "bfloat16":
        return jnp.bfloat16
    if dtype == "float16":
        return np.float16
    raise ConfigError(f"export dtype must be float32, bfloat16 or float16, got {dtype!r}")


# ------------------------------------------------------------------------------------------ HF dirs


def read_hf_config(directory: Path) -> dict[str, Any]:
    path = directory / "config.json"
    if not path.is_file():
        raise WeightsError(f"{path} not found: an HF model directory needs config.json")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise WeightsError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise WeightsError(f"{path} must hold a JSON object")
    return data


def weight_files(directory: Path) -> list[Path]:
    """The ``*.safetensors`` files of an HF directory (all shards of its index, or every file)."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise WeightsError(f"{index} is not a valid safetensors index: {e}") from e
        files = [directory / f for f in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise WeightsError(f"weight file {f} (listed in {index.name}) not found")
        return files
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        other = [p.name for p in directory.glob("*.bin")] + [p.name for p in directory.glob("*.pt*")]
        hint = f" (found {', '.join(other)}: only safetensors are supported)" if other else ""
        raise WeightsError(f"no *.safetensors weight file in {directory}{hint}")
    return files


def load_hf_dir(directory: str | Path, **overrides: Any) -> tuple[Params, LlamaConfig]:
    """Load ``config.json`` + ``*.safetensors`` (single or sharded) from an HF directory."""
    from safetensors import safe_open

    directory = Path(directory)
    config = LlamaConfig.from_hf(read_hf_config(directory), source=str(directory / "config.json"))
    config = override_config(config, overrides)
    handles: dict[str, Any] = {}
    location: dict[str, Path] = {}
    try:
        for path in weight_files(directory):
            try:
                handle = safe_open(str(path), framework="numpy")
            except Exception as e:  # noqa: BLE001 - safetensors raises several types for bad files
                raise WeightsError(f"corrupt or unreadable weight file {path}: {e}") from e
            handles[str(path)] = handle
            for name in handle.keys():
                location[name] = path
        return params_from_tensors(
            config,
            list(location),
            lambda name: handles[str(location[name])].get_tensor(name),
            lambda name: str(location.get(name, directory)),
        ), config
    finally:
        handles.clear()


def export_hf(
    params: Params,
    config: LlamaConfig,
    directory: str | Path,
    *,
    tokenizer: Any = None,
    dtype: str = "float32",
) -> Path:
    """Write an HF ``LlamaForCausalLM`` directory: ``config.json``, ``generation_config.json``,
    ``model.safetensors`` (in ``dtype``: float32, bfloat16 or float16) and, given a Tokenizer, its files.

    Files are replaced atomically; other ``*.safetensors`` files and a shard index left in the directory
    by an earlier export are removed so that loaders see exactly these weights.
    """
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = hf_state_dict(params, config, dtype)
    _atomic_write(directory / "model.safetensors", lambda p: save_file(tensors, p, metadata={"format": "pt"}))
    export_hf_config(config, directory, tokenizer=tokenizer, dtype=dtype)
    for stale in list(directory.glob("*.safetensors")) + [directory / "model.safetensors.index.json"]:
        if stale.name != "model.safetensors" and stale.exists():
            stale.unlink()
    return directory


def export_hf_config(config: LlamaConfig, directory: str | Path, *, tokenizer: Any = None,
                     dtype: str = "float32") -> Path:
    """Write what an HF directory holds besides its weights: ``config.json``, ``generation_config.json``
    and, given a Tokenizer, its files (atomically, as :func:`export_hf`)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    hf_config = config.to_hf()
    hf_config["torch_dtype"] = dtype
    generation = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id}
    if tokenizer is not None:
        generation["pad_token_id"] = tokenizer.pad_id
        tokenizer.save(directory)
    _atomic_write(directory / "config.json", lambda p: Path(p).write_text(json.dumps(hf_config, indent=2)))
    _atomic_write(
        directory / "generation_config.json", lambda p: Path(p).write_text(json.dumps(generation, indent=2))
    )
    return directory


def _atomic_write(path: Path, write: Callable[[str], Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_OVERRIDABLE = ("dtype", "dot_dtype", "remat", "max_position_embeddings", "bos_token_id", "eos_token_id")


def override_config(config: LlamaConfig, overrides: Mapping[str, Any]) -> LlamaConfig:
    """``config`` with load-time ``overrides`` of fields that do not change the weights' shapes."""
    bad = sorted(set(overrides) - set(_OVERRIDABLE))
    if bad:
        raise ConfigError(f"cannot override model field(s) {bad} at load time; allowed: {_OVERRIDABLE}")
    return dataclasses.replace(config, **overrides) if overrides else config
