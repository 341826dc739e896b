"""LoRA adapters applied functionally to the model's parameter tree.

The base tree holds stacked layer kernels ``params["layers"][group][module]["kernel"]`` of shape
``[L, in, out]`` (e.g. ``group = "self_attn"``, ``module = "q_proj"``). An adapter holds, per target
module, ``lora_A`` ``[L, in, r]`` and ``lora_B`` ``[L, r, out]``; the effective kernel is

    W + (alpha / r) · A @ B        (per layer)

``B`` starts at zero, so a fresh adapter leaves the model unchanged (the DPO reference is the base tree
without adapters; for LoRA-GRPO, the base plus the adapter of the last hard update). The base tree
is never modified: :func:`merge` returns a new tree, and gradients
are taken with respect to the adapter only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxdebate.errors import ConfigError
from jaxdebate.model.config import LoraConfig

Adapter = dict[str, dict[str, dict[str, jax.Array]]]


def target_paths(params: Mapping[str, Any], targets: Sequence[str]) -> list[tuple[str, str]]:
    """``(group, module)`` of every target kernel under ``params["layers"]``, in tree order."""
    layers = params.get("layers") if isinstance(params, Mapping) else None
    if not isinstance(layers, Mapping):
        raise ConfigError("LoRA needs a parameter tree with stacked layers under params['layers']")
    found = [
        (group, module)
        for group, modules in layers.items()
        if isinstance(modules, Mapping)
        for module in modules
        if module in targets
    ]
    missing = sorted(set(targets) - {m for _, m in found})
    if missing:
        raise ConfigError(f"lora.targets: modules {missing} are not in the model's layers")
    for group, module in found:
        kernel = layers[group][module].get("kernel") if isinstance(layers[group][module], Mapping) else None
        if kernel is None or getattr(kernel, "ndim", 0) != 3:
            raise ConfigError(f"LoRA target layers.{group}.{module}.kernel must be a stacked [L, in, out] array")
    return found


def init(params: Mapping[str, Any], spec: LoraConfig, key: jax.Array) -> Adapter:
    """A fresh adapter: ``A ~ U(-1/sqrt(in), 1/sqrt(in))`` (PEFT's default bound), ``B = 0``."""
    adapter: Adapter = {}
    paths = target_paths(params, spec.targets)
    for k, (group, module) in zip(jax.random.split(key, len(paths)), paths):
        n_layers, d_in, d_out = params["layers"][group][module]["kernel"].shape
        bound = 1.0 / float(d_in) ** 0.5
        adapter.setdefault(group, {})[module] = {
            "lora_A": jax.random.uniform(k, (n_layers, d_in, spec.rank), jnp.float32, -bound, bound),
            "lora_B": jnp.zeros((n_layers, spec.rank, d_out), jnp.float32),
        }
    return adapter


def delta(adapter_module: Mapping[str, jax.Array], scale: float) -> jax.Array:
    """``scale · A @ B`` per layer: ``[L, in, out]``."""
    return scale * jnp.einsum("lir,lro->lio", adapter_module["lora_A"], adapter_module["lora_B"])


def merge(params: Mapping[str, Any], adapter: Adapter, scale: float) -> dict[str, Any]:
    """A new parameter tree with every adapted kernel replaced by ``W + scale · A @ B``."""
    layers = dict(params["layers"])
    for group, modules in adapter.items():
        new_group = dict(layers[group])
        for module, ab in modules.items():
            base = layers[group][module]
            kernel = base["kernel"]
            new_group[module] = {**base, "kernel": (kernel + delta(ab, scale)).astype(kernel.dtype)}
        layers[group] = new_group
    return {**params, "layers": layers}


def n_params(adapter: Adapter) -> int:
    """Number of trainable adapter parameters."""
    return int(sum(x.size for x in jax.tree_util.tree_leaves(adapter)))
