"""The Flax Llama: config, parameter tree, weights I/O, log-probs, tokenizer and device mesh.

``from jaxdebate.model import load, logits, export_hf`` is the public entry point (see the issue-2 API).
"""

from jaxdebate.model.config import LlamaConfig
from jaxdebate.model.llama import (
    Cache,
    Llama,
    Params,
    forward,
    head_logits,
    init_cache,
    init_params,
    logits,
    param_shapes,
    positions_from_mask,
)
from jaxdebate.model.logprobs import hidden_logprobs, token_logprobs
from jaxdebate.model.mesh import make_mesh, shard_batch, shard_params
from jaxdebate.model.tokenizer import Tokenizer, load_tokenizer
from jaxdebate.model.hf_format import export_hf, hf_state_dict, load_hf_dir, params_from_tensors
from jaxdebate.model.weights import load

__all__ = [
    "Cache",
    "Llama",
    "LlamaConfig",
    "Params",
    "Tokenizer",
    "export_hf",
    "forward",
    "head_logits",
    "hf_state_dict",
    "hidden_logprobs",
    "init_cache",
    "init_params",
    "load",
    "load_hf_dir",
    "load_tokenizer",
    "logits",
    "make_mesh",
    "param_shapes",
    "params_from_tensors",
    "positions_from_mask",
    "shard_batch",
    "shard_params",
    "token_logprobs",
]
