"""Marks for tests that start a real vLLM server process: slow, ``vllm``, skipped with the install hint
when the server's virtualenv is missing."""

import pytest

from jaxdebate.sampling.vllm.config import VLLMConfig

REAL_SERVER = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        not VLLMConfig().installed(),
        reason="vLLM server virtualenv missing: run `bash scripts/install_vllm.sh` to create .venv-vllm",
    ),
]
