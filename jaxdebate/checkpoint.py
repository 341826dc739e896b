"""A trained run's policy for notebooks and tools: a workdir in, parameters, config and exports out.

The storage itself (``Checkpointer`` over orbax) is :mod:`jaxdebate.checkpointer`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from jaxdebate.checkpointer import CheckpointError, open_run
from jaxdebate.config import Config
from jaxdebate.configlib import from_dict
from jaxdebate.model import LlamaConfig, export_hf, load, peft_export
from jaxdebate.model.lora import merge
from jaxdebate.rl.optim import all_finite
from jaxdebate.model.tokenizer import load_tokenizer


def restore(workdir: str | Path, step: int | None = None):
    """``(params, config)`` of a run: the policy parameters at ``step`` (default: latest) and the
    experiment :class:`jaxdebate.config.Config` it was trained with. A LoRA-GRPO run
    (``model.lora.rank > 0``) stores an adapter; it is merged into the base (``model.source``)."""
    adapter, config = restore_trainable(workdir, step)
    if not config.model.lora.enabled:
        return adapter, config
    base, _ = load(config.model.source, dtype=config.model.dtype)
    return merge(base, adapter, config.model.lora.scale), config


def restore_trainable(workdir: str | Path, step: int | None = None):
    """``(tree, config)``: what the run trains at ``step`` as stored (the parameter tree, or under
    LoRA the adapter ``{group: {module: {lora_A, lora_B}}}``)."""
    with contextlib.closing(open_run(workdir)) as ckpt:
        state, meta = ckpt.restore(step, items=["params"])
        finite = [int(s) for s in ckpt.all_steps() if s != int(meta["step"])]
    if not bool(all_finite(state["params"])):
        raise CheckpointError(
            f"{workdir}: checkpoint step {meta['step']} holds non-finite parameters (the run diverged "
            f"before divergence was caught); other steps: {finite or 'none'} (pass step=... / --step)")
    return state["params"], from_dict(Config, meta["config"])


def export_adapter(workdir: str | Path, out_dir: str | Path, step: int | None = None) -> Path:
    """Write a LoRA-GRPO run's adapter at ``step`` in the PEFT format
    (``peft.PeftModel.from_pretrained`` on the exported base model loads it)."""
    adapter, config = restore_trainable(workdir, step)
    if not config.model.lora.enabled:
        raise CheckpointError(f"{workdir} trained every weight (model.lora.rank=0): there is no adapter "
                              f"to export; use export_checkpoint")
    return peft_export.save(out_dir, adapter, config.model.lora, base_model=config.model.source)


def load_policy(workdir: str | Path, step: int | None = None):
    """``(params, llama_config, tokenizer, config)``: everything needed to sample from a trained run."""
    params, config = restore(workdir, step)
    with contextlib.closing(open_run(workdir)) as ckpt:
        meta = ckpt.metadata(step)
    llama = LlamaConfig(**meta["model_config"])
    return params, llama, load_tokenizer(config.model.source), config


def export_checkpoint(workdir: str | Path, out_dir: str | Path, step: int | None = None,
                      *, dtype: str = "float32") -> Path:
    """Write a run's policy at ``step`` as an HF directory (config.json, safetensors, tokenizer)."""
    params, llama, tokenizer, _ = load_policy(workdir, step)
    out = Path(out_dir)
    export_hf(params, llama, out, tokenizer=tokenizer, dtype=dtype)
    return out


__all__ = ["export_adapter", "export_checkpoint", "load_policy", "restore", "restore_trainable"]
