"""Load Llama weights from any source string into the parameter tree (``load``), and the ``tiny``
random source. The HF format lives in :mod:`jaxdebate.model.hf_format`, GGUF reading in
:mod:`jaxdebate.model.gguf`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from jaxdebate.errors import ConfigError, WeightsError
from jaxdebate.model import sources
from jaxdebate.model.config import LlamaConfig
from jaxdebate.model.gguf import load_gguf
from jaxdebate.model.hf_format import override_config, load_hf_dir
from jaxdebate.model.llama import Params, init_params

__all__ = ["load", "tiny_config"]

_TINY_OPTIONS = {
    "layers": ("num_layers", int, 2),
    "hidden": ("hidden_size", int, 64),
    "heads": ("num_heads", int, 4),
    "kv_heads": ("num_kv_heads", int, 2),
    "head_dim": ("head_dim", int, None),
    "intermediate": ("intermediate_size", int, 128),
    "vocab": ("vocab_size", int, 49152),
    "max_pos": ("max_position_embeddings", int, 2048),
    "rope_theta": ("rope_theta", float, 10000.0),
    "tie": ("tie_word_embeddings", "bool", True),
    "dtype": ("dtype", str, "float32"),
    "seed": (None, "seed", 0),
    "std": (None, "std", 0.02),
}


# ------------------------------------------------------------------------------------------ tiny


def tiny_config(options: Mapping[str, str] | None = None) -> tuple[LlamaConfig, int, float]:
    """The config, seed and init std of a ``tiny[:k=v,...]`` source (options: ``_TINY_OPTIONS``;
    a larger ``std`` than HF's 0.02 gives peakier next-token distributions)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(_TINY_OPTIONS))
    if unknown:
        raise WeightsError(f"unknown tiny option(s) {unknown}; known: {', '.join(_TINY_OPTIONS)}")
    kw: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, (field, kind, default) in _TINY_OPTIONS.items():
        raw = options.get(key)
        try:
            if raw is None:
                value = default
            elif kind == "seed":
                value = int(raw)
            elif kind == "std":
                value = float(raw)
                if not value > 0:
                    raise ValueError("must be > 0")
            elif kind == "bool":
                if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(f"not a boolean: {raw!r}")
                value = raw.lower() in ("1", "true", "yes")
            else:
                value = kind(raw)
        except ValueError as e:
            raise WeightsError(f"tiny option {key}={raw!r} is invalid: {e}") from e
        if field is None:
            extra[kind] = value
        elif value is not None:
            kw[field] = value
    kw.setdefault("head_dim", kw["hidden_size"] // kw["num_heads"])
    try:
        return LlamaConfig(**kw), extra["seed"], extra["std"]
    except ConfigError as e:
        raise WeightsError(f"tiny source options give an invalid model: {e}") from e


# ------------------------------------------------------------------------------------------ entry


def load(source: str, **overrides: Any) -> tuple[Params, LlamaConfig]:
    """Parameters and config for a source string (see :mod:`jaxdebate.model.sources`).

    Keyword overrides replace config fields that do not change the weights' shapes, e.g.
    ``dtype="bfloat16"`` or ``remat="full"``.
    """
    src = sources.parse_source(source)
    if src.kind == "tiny":
        config, seed, std = tiny_config(src.option_dict)
        config = override_config(config, overrides)
        params = init_params(config, seed)
        if std != 0.02:  # rescale the normal(0.02) matrices; norm scales stay 1
            params = _rescale(params, std / 0.02)
        return params, config
    if src.kind == "gguf":
        return load_gguf(src.path, **overrides)
    if src.kind == "hub":
        return load_hf_dir(sources.hub_snapshot(src.text), **overrides)
    return load_hf_dir(src.path, **overrides)


def _rescale(params: Params, factor: float) -> Params:
    def scale(path, x):
        return x if "scale" in jax.tree_util.keystr(path) else x * factor

    return jax.tree_util.tree_map_with_path(scale, params)
