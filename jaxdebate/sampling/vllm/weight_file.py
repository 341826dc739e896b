"""The file a weight sync sends to the vLLM server: the parameter tree as one safetensors file in the
server's dtype, under HF tensor names, with every matrix kept in the JAX ``[in, out]`` layout.

Why not an HF export: transposing to HF's ``[out, in]`` costs as much as the cast, and vLLM's CPU GEMM
packing reads either layout at the same cost, so the worker extension takes the matrices as
transposed views instead (metadata ``jaxdebate.layout = in_out``). The cast happens while copying
into the memory-mapped file (no intermediate arrays); on an accelerator it happens on the device,
so only the server's dtype crosses to the host.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import struct
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdebate.errors import ConfigError
from jaxdebate.model.hf_format import LAYER_TENSORS

#: Metadata key and value marking matrices stored ``[in, out]`` (also in ``in_server.worker_ext``).
LAYOUT_KEY = "jaxdebate.layout"
LAYOUT_IN_OUT = "in_out"
FILE_NAME = "weights.safetensors"

_DTYPES = {"float32": (np.dtype(np.float32), "F32"), "bfloat16": (np.dtype(jnp.bfloat16), "BF16"),
           "float16": (np.dtype(np.float16), "F16")}


@dataclasses.dataclass(frozen=True)
class _Block:
    """Consecutive tensors of the file filled from one host array (a whole layer stack at once)."""

    offset: int
    source: np.ndarray


class SyncFile:
    """One planned sync file: its header and where each parameter's bytes go.

    Build it per sync (``SyncFile(params, config, "bfloat16")``), then :meth:`write` it to a path or
    :meth:`to_bytes` for an HTTP push. Tensors: ``model.embed_tokens.weight`` ``[vocab, d]``, norms,
    per layer ``*_proj.weight`` ``[in, out]``, and ``lm_head.weight`` ``[d, vocab]`` when untied.
    """

    def __init__(self, params: Any, config: Any, dtype: str) -> None:
        if dtype not in _DTYPES:
            raise ConfigError(f"weight sync dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        self.dtype = dtype
        np_dtype, code = _DTYPES[dtype]
        entries: dict[str, dict[str, Any]] = {}
        blocks: list[_Block] = []
        offset = 0

        def add(names: list[str], source: np.ndarray, stacked: bool = False) -> None:
            nonlocal offset
            blocks.append(_Block(offset, source))
            per = source.size // len(names) * np_dtype.itemsize
            shape = list(source.shape[1:] if stacked else source.shape)
            for name in names:
                entries[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + per]}
                offset += per

        add(["model.embed_tokens.weight"], _host(params["embed_tokens"]["embedding"], np_dtype))
        for path, module, _ in LAYER_TENSORS:
            node = params["layers"]
            for key in path:
                node = node[key]
            names = [f"model.layers.{i}.{module}.weight" for i in range(config.num_layers)]
            add(names, _host(node, np_dtype), stacked=True)
        add(["model.norm.weight"], _host(params["norm"]["scale"], np_dtype))
        if not config.tie_word_embeddings:
            add(["lm_head.weight"], _host(params["lm_head"]["kernel"], np_dtype))
        entries["__metadata__"] = {"format": "pt", LAYOUT_KEY: LAYOUT_IN_OUT}
        header = json.dumps(entries, separators=(",", ":")).encode()
        header += b" " * (-len(header) % 8)  # the data starts 8-byte aligned
        self.header = struct.pack("<Q", len(header)) + header
        self.size = len(self.header) + offset
        self._np_dtype = np_dtype
        self._blocks = blocks

    def fill(self, buffer: memoryview) -> None:
        """Write the whole file into ``buffer`` (``size`` writable bytes), casting on the way."""
        buffer[: len(self.header)] = self.header
        base = len(self.header)
        for block in self._blocks:
            dst = np.frombuffer(buffer, self._np_dtype, block.source.size, base + block.offset)
            np.copyto(dst.reshape(block.source.shape), block.source, casting="unsafe")

    def to_bytes(self) -> bytearray:
        """The whole file in memory (the body of an HTTP push)."""
        out = bytearray(self.size)
        with memoryview(out) as view:
            self.fill(view)
        return out


class SyncWriter:
    """Writes successive sync files over one file, in place, through a mapping kept open.

    A fresh file on tmpfs costs a zeroed page per 4 KiB and a new mapping a fault per page, which
    doubled the write (bench/README "weight sync"). Syncs never overlap, and the server
    has finished reading a file before the next sync starts, so overwriting is safe."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._map: mmap.mmap | None = None

    def write(self, sync: SyncFile) -> Path:
        """Write ``sync`` at :attr:`path` and flush it (a server on another host reads it next)."""
        if self._map is None or len(self._map) != sync.size:
            self.close()
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            os.ftruncate(self._fd, sync.size)
            self._map = mmap.mmap(self._fd, sync.size)
        with memoryview(self._map) as view:
            sync.fill(view)
        self._map.flush()
        return self.path

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _host(leaf: Any, dtype: np.dtype) -> np.ndarray:
    """A host array for ``leaf``: a zero-copy view when it lives on the CPU (cast while writing),
    else cast on its device first so that only ``dtype`` bytes are transferred."""
    if isinstance(leaf, jax.Array) and any(d.platform != "cpu" for d in leaf.devices()):
        leaf = jax.device_get(leaf.astype(dtype))
    return np.ascontiguousarray(leaf)
