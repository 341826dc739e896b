"""Save and load LoRA adapters in the PEFT format (``adapter_config.json`` + ``adapter_model.safetensors``).

PEFT names a LoRA weight ``base_model.model.model.layers.{i}.{group}.{module}.lora_{A,B}.weight`` and
stores it like a ``torch.nn.Linear`` weight, ``[out, in]``: ``lora_A`` is ``[r, in]``, ``lora_B`` is
``[out, r]``. Ours are stacked over layers with kernels ``[in, out]`` (``A`` ``[L, in, r]``, ``B``
``[L, r, out]``), so export is a per-layer transpose; PEFT's scaling ``lora_alpha / r`` equals ours.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate.model.config import LoraConfig
from jaxdebate.model.lora import Adapter
from jaxdebate.errors import WeightsError

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_KEY = re.compile(r"base_model\.model\.model\.layers\.(\d+)\.(\w+)\.(\w+)\.(lora_A|lora_B)\.weight")


def adapter_config(spec: LoraConfig, base_model: str | None = None) -> dict[str, Any]:
    """The ``adapter_config.json`` dict PEFT's ``LoraConfig`` reads."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": spec.rank,
        "lora_alpha": spec.alpha,
        "lora_dropout": 0.0,
        "target_modules": sorted(spec.targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "modules_to_save": None,
        "layers_to_transform": None,
        "revision": None,
    }


def to_peft_tensors(adapter: Adapter) -> dict[str, np.ndarray]:
    """Our stacked adapter as PEFT's flat ``{name: [out, in] array}`` dict (fp32)."""
    out: dict[str, np.ndarray] = {}
    for group, modules in adapter.items():
        for module, ab in modules.items():
            a = np.asarray(ab["lora_A"], dtype=np.float32)  # [L, in, r]
            b = np.asarray(ab["lora_B"], dtype=np.float32)  # [L, r, out]
            for layer in range(a.shape[0]):
                prefix = f"base_model.model.model.layers.{layer}.{group}.{module}"
                out[f"{prefix}.lora_A.weight"] = np.ascontiguousarray(a[layer].T)
                out[f"{prefix}.lora_B.weight"] = np.ascontiguousarray(b[layer].T)
    return out


def save(directory: str | Path, adapter: Adapter, spec: LoraConfig, base_model: str | None = None) -> Path:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` into ``directory``."""
    from safetensors.numpy import save_file

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    save_file(to_peft_tensors(adapter), str(path / WEIGHTS_FILE), metadata={"format": "pt"})
    (path / CONFIG_FILE).write_text(json.dumps(adapter_config(spec, base_model), indent=2) + "\n")
    return path


def load(directory: str | Path) -> tuple[Adapter, LoraConfig]:
    """Read a PEFT LoRA adapter directory back into our stacked adapter and its spec."""
    from safetensors.numpy import load_file

    path = Path(directory)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (path / name).is_file():
            raise WeightsError(f"{path} is not a PEFT adapter directory: {name} is missing")
    try:
        cfg = json.loads((path / CONFIG_FILE).read_text())
    except json.JSONDecodeError as e:
        raise WeightsError(f"{path / CONFIG_FILE} is not valid JSON: {e}") from e
    if cfg.get("peft_type") != "LORA":
        raise WeightsError(f"{path / CONFIG_FILE}: peft_type is {cfg.get('peft_type')!r}, expected 'LORA'")
    for field in ("use_dora", "use_rslora", "fan_in_fan_out"):
        if cfg.get(field):
            raise WeightsError(f"{path / CONFIG_FILE}: {field}=true is not supported")
    targets = cfg.get("target_modules")
    if isinstance(targets, str):
        raise WeightsError(f"{path / CONFIG_FILE}: target_modules as a regex ({targets!r}) is not supported")
    spec = LoraConfig(rank=int(cfg["r"]), alpha=float(cfg["lora_alpha"]), targets=tuple(sorted(targets)))
    tensors = load_file(str(path / WEIGHTS_FILE))
    per_module: dict[tuple[str, str], dict[str, dict[int, np.ndarray]]] = {}
    for key, value in tensors.items():
        m = _KEY.fullmatch(key)
        if m is None:
            raise WeightsError(f"{path / WEIGHTS_FILE}: unexpected tensor {key!r}")
        layer, group, module, which = int(m[1]), m[2], m[3], m[4]
        per_module.setdefault((group, module), {}).setdefault(which, {})[layer] = value
    adapter: Adapter = {}
    for (group, module), parts in per_module.items():
        layers = sorted(parts.get("lora_A", {}))
        if layers != list(range(len(layers))) or sorted(parts.get("lora_B", {})) != layers:
            raise WeightsError(f"{path / WEIGHTS_FILE}: {group}.{module} has an incomplete set of layers")
        a = np.stack([parts["lora_A"][i].T for i in layers])
        b = np.stack([parts["lora_B"][i].T for i in layers])
        if a.shape[-1] != spec.rank or b.shape[1] != spec.rank:
            raise WeightsError(
                f"{path / WEIGHTS_FILE}: {group}.{module} has rank {a.shape[-1]}, config says r={spec.rank}"
            )
        adapter.setdefault(group, {})[module] = {"lora_A": a, "lora_B": b}
    return adapter, spec
