"""Methods added to vLLM's GPU/CPU worker (``--worker-extension-cls``), called via ``/collective_rpc``.

This file runs inside the vLLM server's own virtualenv, so it imports only the standard library at
module level (torch and vllm are there when the methods run) and nothing from jaxdebate: the server
loads it as the top-level module ``jaxdebate_vllm_ext`` from a copy placed on its ``PYTHONPATH``.

``load_weights_files`` is the weight sync: it reads safetensors files (HF names; matrices ``[out,
in]``, or ``[in, out]`` when the file's metadata says ``jaxdebate.layout = in_out``, as
:mod:`jaxdebate.sampling.vllm.weight_file` writes them) and loads them in place. On vLLM's CPU backend
with one unquantised shard per layer it skips vLLM's generic reload (which rebuilds every layer on
the meta device, buffers, re-materialises and copies back): each linear layer gets its new matrix
and re-packs it for the CPU GEMM kernel, every other parameter is copied in place. Elsewhere
(GPU, tensor parallelism, quantisation) it hands the tensors to vLLM's ``reload_weights``.

``refresh_lm_head``: after any reload on the CPU backend, a tied ``lm_head`` keeps the packed copy of
the embedding matrix made at start-up (the tied head is never "loaded", so never repacked); this
re-runs the head's weight processing so the output layer uses the new matrix.
"""

from __future__ import annotations

import time

MODULE_NAME = "jaxdebate_vllm_ext"
CLASS_NAME = "JaxdebateWorkerExtension"
LAYOUT_KEY = "jaxdebate.layout"  # as in jaxdebate.sampling.vllm.weight_file
LAYOUT_IN_OUT = "in_out"


class JaxdebateWorkerExtension:
    """Mixed into vLLM's Worker class; ``self`` is the worker."""

    def _jaxdebate_model(self):
        runner = self.model_runner
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def refresh_lm_head(self) -> dict:
        """Re-process every LM head so packed kernel copies match the (possibly tied) weight."""
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

        model = self._jaxdebate_model()
        refreshed = []
        for name, module in model.named_modules():
            if isinstance(module, ParallelLMHead):
                method = getattr(module, "quant_method", None)
                if method is not None and hasattr(method, "process_weights_after_loading"):
                    method.process_weights_after_loading(module)
                    refreshed.append(name)
        return {"refreshed": refreshed}

    def load_weights_files(self, paths: list[str], direct: bool = True) -> dict:
        """Load every tensor of these safetensors files into the served model, then refresh the LM
        heads. Tensors absent from the files keep their values. ``direct=False`` always takes vLLM's
        generic reload (what GPUs use; tests compare both). Returns the path taken and its time."""
        from safetensors import safe_open

        t0 = time.perf_counter()
        model = self._jaxdebate_model()
        tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
        tensors = {}
        handles = [safe_open(str(p), framework="pt", device="cpu") for p in paths]
        for handle in handles:
            in_out = (handle.metadata() or {}).get(LAYOUT_KEY) == LAYOUT_IN_OUT
            for name in handle.keys():
                if name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight"):
                    continue
                tensor = handle.get_tensor(name)
                tensors[name] = tensor.t() if in_out and _is_matrix(name, tensor) else tensor
        if direct and _direct_loadable(model):
            mode = "direct"
            _load_direct(model, tensors)
        else:
            mode = "vllm"
            self.model_runner.reload_weights(weights_iterator=iter(sorted(tensors.items(), key=_layer_order)))
        del tensors, handles
        refreshed = self.refresh_lm_head()["refreshed"]
        return {"mode": mode, "seconds": time.perf_counter() - t0, "refreshed": refreshed}


def _is_matrix(name: str, tensor) -> bool:
    """The tensors :mod:`weight_sync` stores ``[in, out]``: linear layers' matrices and an untied head."""
    return tensor.dim() == 2 and (name.endswith("_proj.weight") or name == "lm_head.weight")


def _layer_order(item) -> tuple:
    """Tensors grouped by layer, so vLLM's layerwise reload buffers one layer at a time."""
    parts = item[0].split(".")
    layer = int(parts[2]) if len(parts) > 2 and parts[1] == "layers" and parts[2].isdigit() else -1
    return layer, item[0]


def _direct_loadable(model) -> bool:
    """True on the CPU backend when every linear layer is unquantised, bias-free and unsharded."""
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    for module in model.modules():
        if isinstance(module, LinearBase):
            if type(module.quant_method) is not UnquantizedLinearMethod or getattr(module, "tp_size", 1) != 1:
                return False
            if getattr(module, "bias", None) is not None:
                return False
        elif getattr(module, "tp_size", 1) != 1:
            return False
    return True


def _load_direct(model, tensors: dict) -> None:
    """Each linear layer: its (merged) new matrix, then vLLM's CPU weight processing (packing);
    every other parameter: an in-place copy. Unknown names and wrong shapes are errors."""
    import torch
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.utils import check_cpu_sgl_kernel

    packed = dict(getattr(model, "packed_modules_mapping", {}) or {})
    remaining = dict(tensors)
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, LinearBase):
                continue
            prefix, _, leaf = name.rpartition(".")
            sources = [f"{prefix}.{part}.weight" for part in packed.get(leaf, [leaf])]
            present = [s for s in sources if s in remaining]
            if not present:
                continue
            if len(present) != len(sources):
                missing = sorted(set(sources) - set(present))
                raise ValueError(f"weight sync: {name} needs {sources} together, missing {missing}")
            parts = [remaining.pop(s) for s in sources]
            dtype = module.weight.dtype
            expected = (module.output_size_per_partition, module.input_size_per_partition)
            # on CPUs with AMX vLLM packs small bf16/fp16 matrices for its tiles, and that packer reads
            # only row-major storage; everywhere else the transposed view is served without a copy
            matrix = _stack_rows(parts, row_major=check_cpu_sgl_kernel(*expected, dtype)).to(dtype)
            if tuple(matrix.shape) != expected:
                raise ValueError(f"weight sync: {sources[0]}... give {tuple(matrix.shape)} for {name}, "
                                 f"the served model has {expected}")
            module.weight = torch.nn.Parameter(matrix, requires_grad=False)
            module.quant_method.process_weights_after_loading(module)
        params = dict(model.named_parameters())
        for name, tensor in remaining.items():
            param = params.get(name)
            if param is None:
                raise ValueError(f"weight sync: the served model has no parameter {name!r}")
            target = param.data
            if target.dim() == tensor.dim() and target.shape[1:] == tensor.shape[1:] and target.shape[0] > tensor.shape[0]:
                target = target[: tensor.shape[0]]  # a vocabulary padded by vLLM
            if target.shape != tensor.shape:
                raise ValueError(f"weight sync: {name} has shape {tuple(tensor.shape)}, the served model "
                                 f"has {tuple(param.shape)}")
            target.copy_(tensor)


def _stack_rows(parts: list, row_major: bool = False):
    """The ``[out, in]`` parts of a merged layer (q|k|v, gate|up) stacked along ``out``. Transposed
    views (``[in, out]`` storage) are joined in their storage layout and stay transposed, unless
    ``row_major`` asks for ``[out, in]`` storage."""
    import torch

    if len(parts) == 1:
        return parts[0].contiguous() if row_major else parts[0]
    if not row_major and all(p.t().is_contiguous() for p in parts):
        return torch.cat([p.t() for p in parts], dim=1).t()
    return torch.cat(parts, dim=0)
