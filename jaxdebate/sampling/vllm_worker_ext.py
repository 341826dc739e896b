"""Methods added to vLLM's GPU/CPU worker (``--worker-extension-cls``), called via ``/collective_rpc``.

This file runs inside the vLLM server's own virtualenv, so it imports only the standard library at
module level (torch and vllm are there when the methods run) and nothing from jaxdebate: the server
loads it as the top-level module ``jaxdebate_vllm_ext`` from a copy placed on its ``PYTHONPATH``.

Why it exists: after an in-place ``reload_weights`` on vLLM's CPU backend, a tied ``lm_head`` keeps
the packed copy of the embedding matrix made at start-up (vLLM repacks linear weights for its CPU
GEMM kernels and the tied head is never "loaded", so it is never repacked). ``refresh_lm_head`` re-runs
the head's weight processing so the output layer uses the freshly loaded matrix.
"""

from __future__ import annotations

MODULE_NAME = "jaxdebate_vllm_ext"
CLASS_NAME = "JaxdebateWorkerExtension"


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
