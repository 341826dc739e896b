"""Llama GGUF files (llama.cpp's format, e.g. the bundled SmolLM2 Q4_1): their metadata as a
LlamaConfig and their tensors dequantised into the parameter tree, cached as an HF directory."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from jaxdebate.errors import WeightsError
from jaxdebate.model import sources
from jaxdebate.model.config import LlamaConfig
from jaxdebate.model.hf_format import override_config, export_hf, load_hf_dir, params_from_tensors
from jaxdebate.model.llama import Params

_GGUF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_GGUF_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _gguf_field(reader: Any, key: str, path: Path, default: Any = ...) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is ...:
            raise WeightsError(f"GGUF file {path} lacks metadata field {key!r}")
        return default
    return field.contents()


def gguf_config(reader: Any, path: Path) -> LlamaConfig:
    """LlamaConfig from a GGUF file's metadata (``general.architecture`` must be ``llama``)."""
    arch = _gguf_field(reader, "general.architecture", path)
    if arch != "llama":
        raise WeightsError(f"GGUF file {path}: general.architecture={arch!r} is not a Llama-family model")
    p = "llama."
    heads = int(_gguf_field(reader, p + "attention.head_count", path))
    hidden = int(_gguf_field(reader, p + "embedding_length", path))
    vocab = _gguf_field(reader, p + "vocab_size", path, None)
    if vocab is None:
        vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    names = {t.name for t in reader.tensors}
    hf = {
        "model_type": "llama",
        "vocab_size": int(vocab),
        "hidden_size": hidden,
        "intermediate_size": int(_gguf_field(reader, p + "feed_forward_length", path)),
        "num_hidden_layers": int(_gguf_field(reader, p + "block_count", path)),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_gguf_field(reader, p + "attention.head_count_kv", path, heads)),
        "head_dim": int(_gguf_field(reader, p + "rope.dimension_count", path, hidden // heads)),
        "rope_theta": float(_gguf_field(reader, p + "rope.freq_base", path, 10000.0)),
        "rms_norm_eps": float(_gguf_field(reader, p + "attention.layer_norm_rms_epsilon", path, 1e-5)),
        "max_position_embeddings": int(_gguf_field(reader, p + "context_length", path, 2048)),
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": _gguf_field(reader, "tokenizer.ggml.bos_token_id", path, 1),
        "eos_token_id": _gguf_field(reader, "tokenizer.ggml.eos_token_id", path, 2),
    }
    scaling = _gguf_field(reader, p + "rope.scaling.type", path, None)
    if scaling not in (None, "none"):
        raise WeightsError(f"GGUF file {path}: rope scaling {scaling!r} is not supported")
    return LlamaConfig.from_hf(hf, source=str(path))


def _unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's conversion permutation of Q/K rows (interleaved rotary -> HF half-split)."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_gguf(path: str | Path, **overrides: Any) -> tuple[Params, LlamaConfig]:
    """Dequantise a Llama GGUF file; the result is cached as an HF directory under ``cache_dir()``."""
    path = Path(path)
    cached = sources.cache_dir() / f"gguf-{sources.file_fingerprint(path)}"
    if (cached / "model.safetensors").is_file() and (cached / "config.json").is_file():
        return load_hf_dir(cached, **overrides)
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - the GGUF reader raises many types for bad files
        raise WeightsError(f"corrupt or unreadable GGUF file {path}: {e}") from e
    config = gguf_config(reader, path)
    tensors = {t.name: t for t in reader.tensors}
    names: dict[str, str] = {}
    for name in tensors:
        if name in _GGUF_NAMES:
            names[_GGUF_NAMES[name]] = name
            continue
        m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", name)
        if m and m.group(2) in _GGUF_LAYER_NAMES:
            names[f"model.layers.{m.group(1)}.{_GGUF_LAYER_NAMES[m.group(2)]}.weight"] = name
        elif name != "rope_freqs.weight":
            raise WeightsError(f"unexpected tensor {name!r} in GGUF file {path}")

    def get(hf_name: str) -> np.ndarray:
        tensor = tensors[names[hf_name]]
        w = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        if ".q_proj." in hf_name:
            w = _unpermute_qk(w, config.num_heads)
        elif ".k_proj." in hf_name:
            w = _unpermute_qk(w, config.num_kv_heads)
        return w

    params = params_from_tensors(
        config, names, get, lambda name: f"GGUF file {path} (tensor {names.get(name, name)})"
    )
    tmp = Path(tempfile.mkdtemp(dir=cached.parent, prefix=cached.name + "."))
    try:
        export_hf(params, config, tmp)
        tmp.rename(cached)
    except OSError:  # another process cached it first
        shutil.rmtree(tmp, ignore_errors=True)
    return params, override_config(config, overrides)
