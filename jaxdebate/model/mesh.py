"""Device mesh and placement: parameters replicated (or FSDP-sharded) and batches split over the
``data`` axis with ``NamedSharding``. jit-compiled code then runs unchanged on 1 or N devices."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxdebate.errors import ConfigError


def make_mesh(num_devices: int | None = None, axis: str = "data") -> Mesh:
    """A 1-D mesh over the first ``num_devices`` devices (default: all local devices)."""
    devices = jax.devices()
    n = len(devices) if num_devices is None else num_devices
    if not 1 <= n <= len(devices):
        raise ConfigError(f"mesh.num_devices={num_devices} but {len(devices)} device(s) are available")
    return Mesh(np.asarray(devices[:n]), (axis,))


def _axis(mesh: Mesh) -> str:
    return mesh.axis_names[0]


def param_spec(shape: tuple[int, ...], mesh: Mesh, fsdp: bool) -> PartitionSpec:
    """Replicated, or (FSDP) the largest axis divisible by the mesh size sharded over the data axis."""
    size = mesh.devices.size
    if not fsdp or size == 1:
        return PartitionSpec()
    candidates = [i for i, n in enumerate(shape) if n % size == 0 and n >= size]
    if not candidates:
        return PartitionSpec()
    best = max(candidates, key=lambda i: (shape[i], -i))
    spec: list[Any] = [None] * len(shape)
    spec[best] = _axis(mesh)
    return PartitionSpec(*spec)


def param_shardings(params: Any, mesh: Mesh, *, fsdp: bool = False) -> Any:
    """The NamedSharding of every leaf of a parameter tree (or tree of shapes)."""
    return jax.tree.map(lambda x: NamedSharding(mesh, param_spec(tuple(x.shape), mesh, fsdp)), params)


def spans_processes(mesh: Mesh) -> bool:
    """True when the mesh holds devices of other processes (a multi-process run's global mesh)."""
    return any(d.process_index != jax.process_index() for d in mesh.devices.flat)


def shard_params(params: Any, mesh: Mesh, *, fsdp: bool = False) -> Any:
    """Place a parameter tree on the mesh: replicated by default, FSDP-sharded with ``fsdp=True``.

    On a mesh spanning processes, process-local arrays go through host memory: every process holds
    the same values (the same seeded init or checkpoint), and JAX builds the global array from them."""
    if spans_processes(mesh):
        params = jax.tree.map(lambda x: np.asarray(x) if getattr(x, "is_fully_addressable", False) else x, params)
    return jax.device_put(params, param_shardings(params, mesh, fsdp=fsdp))


def replicated(shape_tree: Any, mesh: Mesh) -> Any:
    """A tree of ``jax.ShapeDtypeStruct`` (e.g. a restore target) with every leaf replicated on ``mesh``."""
    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), shape_tree)


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(_axis(mesh), *([None] * (ndim - 1))))


def shard_batch(x: Any, mesh: Mesh) -> Any:
    """Split every array of ``x`` (a tree) along its leading (batch) axis over the data axis."""
    size = mesh.devices.size

    def put(a):
        a = np.asarray(a) if not isinstance(a, jax.Array) else a
        if a.ndim == 0:
            return jax.device_put(a, NamedSharding(mesh, PartitionSpec()))
        if a.shape[0] % size:
            raise ConfigError(
                f"batch of {a.shape[0]} rows cannot be split over {size} devices; use a multiple of {size}"
            )
        return jax.device_put(a, batch_sharding(mesh, a.ndim))

    return jax.tree.map(put, x)


def sampling_devices(local: list, training: int, wanted: int) -> list:
    """Process 0's devices for the in-process sampler: the ``wanted`` devices after the ``training``
    ones when the process has room for both (separate sampling GPUs, as in the seeds' launch), else
    its first ``wanted`` (shared with the learner)."""
    if wanted > len(local):
        raise ConfigError(f"launch.sampling_devices={wanted} but process 0 has {len(local)} device(s)")
    start = training if training + wanted <= len(local) else 0
    return local[start:start + wanted]
