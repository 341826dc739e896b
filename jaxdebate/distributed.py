"""Multi-process training on JAX's own runtime: which process group this process belongs to, starting
``jax.distributed``, and the few host-side exchanges the trainer needs.

One experiment runs as N identical processes (one per host, or one per GPU). Every process holds the
same seeded data stream and runs every jitted learner step on a global mesh; process 0 alone samples
(its sampler sees the step's items), logs and writes metrics, and hands each step's training samples
to the others (:func:`broadcast_bytes`). Orbax saves and restores collectively. With one process
every function here is the identity, so single-process runs take exactly the code path they always did.
"""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxdebate.errors import ConfigError

SLURM_VARIABLES = ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_STEP_NODELIST")


@dataclasses.dataclass(frozen=True)
class ProcessGroup:
    """The processes of one run: ``coordinator`` ``HOST:PORT`` (None: JAX finds it, e.g. from SLURM),
    ``num_processes`` and this process's ``process_id``; ``source`` says where it came from."""

    num_processes: int
    process_id: int
    coordinator: str | None = None
    source: str = "flags"

    def __post_init__(self) -> None:
        if self.num_processes < 1:
            raise ConfigError(f"--num-processes must be >= 1, got {self.num_processes}")
        if not 0 <= self.process_id < self.num_processes:
            raise ConfigError(f"--process-id must be in [0, {self.num_processes}), got {self.process_id}")
        if self.coordinator is not None:
            host, sep, port = self.coordinator.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"--coordinator must be HOST:PORT, got {self.coordinator!r}")


def detect(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
           env: Mapping[str, str] | None = None) -> ProcessGroup | None:
    """The process group from explicit flags (all three, or none), else from a SLURM job step with more
    than one task (``srun``; JAX reads the coordinator from SLURM's node list); None: one process."""
    flags = (coordinator, num_processes, process_id)
    if any(f is not None for f in flags):
        if any(f is None for f in flags):
            raise ConfigError("--coordinator, --num-processes and --process-id go together (all three or none)")
        group = ProcessGroup(int(num_processes), int(process_id), coordinator, "flags")
        return group if group.num_processes > 1 else None
    env = os.environ if env is None else env
    if all(k in env for k in SLURM_VARIABLES):
        try:
            n, rank = int(env["SLURM_NTASKS"]), int(env["SLURM_PROCID"])
        except ValueError as e:
            raise ConfigError(f"SLURM_NTASKS/SLURM_PROCID are not integers: {e}") from None
        if n > 1:
            return ProcessGroup(n, rank, None, "slurm")
    return None


def task_devices(env: Mapping[str, str] | None = None) -> list[int] | None:
    """The local GPU ids of this SLURM task: every GPU SLURM made visible to it (``CUDA_VISIBLE_DEVICES``,
    renumbered from 0), or None where SLURM pinned none (CPU jobs). JAX's own SLURM detection would
    give each process one device, ``SLURM_LOCALID``, which is wrong for a task holding several GPUs."""
    env = os.environ if env is None else env
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return list(range(len(visible))) or None


def initialize(group: ProcessGroup | None) -> None:
    """Start ``jax.distributed`` for ``group`` (before any other JAX computation); nothing for None."""
    if group is None:
        return
    import jax

    if group.source == "slurm":  # coordinator, process count and id from SLURM's environment
        jax.distributed.initialize(local_device_ids=task_devices())
    else:
        jax.distributed.initialize(group.coordinator, num_processes=group.num_processes,
                                   process_id=group.process_id)


def is_multiprocess() -> bool:
    import jax

    return jax.process_count() > 1


def check_training_devices(n: int) -> None:
    """ConfigError unless ``launch.training_devices`` = ``n`` devices are visible, and, in a
    multi-process run, ``n`` is the global device count (every process learns on the one mesh)."""
    import jax

    if n > len(jax.devices()):
        raise ConfigError(f"launch.training_devices={n} but only {len(jax.devices())} device(s) are visible")
    if is_multiprocess() and n != jax.device_count():
        raise ConfigError(
            f"launch.training_devices={n} must be the global device count in a multi-process run: "
            f"{jax.process_count()} processes x {jax.local_device_count()} local device(s) = {jax.device_count()}")


def is_main() -> bool:
    """True on process 0 (the one that samples, logs and writes metrics), and in a single process."""
    import jax

    return jax.process_index() == 0


def broadcast_bytes(payload: bytes | None) -> bytes:
    """Process 0's ``payload`` on every process (the others pass None). Collective: every process
    must call it at the same point. One process: the payload itself."""
    if not is_multiprocess():
        return payload or b""
    from jax.experimental import multihost_utils

    data = np.frombuffer(payload or b"", np.uint8) if is_main() else np.zeros(0, np.uint8)
    size = int(multihost_utils.broadcast_one_to_all(np.asarray(data.size, np.int64)))
    buffer = np.zeros(size, np.uint8)
    if is_main():
        buffer[:] = data
    return np.asarray(multihost_utils.broadcast_one_to_all(buffer)).tobytes()


def broadcast_arrays(arrays: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """Process 0's named numpy arrays on every process (``.npz`` bytes, never pickled objects)."""
    payload = None
    if is_main():
        out = io.BytesIO()
        np.savez(out, **dict(arrays or {}))
        payload = out.getvalue()
    with np.load(io.BytesIO(broadcast_bytes(payload)), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def any_process(flag: bool) -> bool:
    """True on every process when ``flag`` is True on any (collective). One process: ``flag``."""
    if not is_multiprocess():
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.asarray(bool(flag)))))


def host_local(tree: Any) -> Any:
    """A numpy copy of a tree of (replicated) global arrays, readable by this process alone: what a
    process-local sampler or an export needs. Leaves sharded across processes are gathered first
    (collective)."""
    import jax

    def local(x: Any) -> np.ndarray:
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            if x.is_fully_replicated:
                return np.asarray(x.addressable_data(0))
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree.map(local, tree)
