"""What a training checkpoint holds, as orbax items and JSON metadata, and back.

A run's resumable state is the learner's :class:`~jaxdebate.rl.grpo.TrainState`, the RNG after the
last completed step, the data stream's position and which weights the sampler and the KL reference
hold (by the step that produced them). Reference and sampler trees are stored only when they are not
copies of the policy, so a checkpoint usually holds one parameter tree plus the optimiser state.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdebate.checkpointer import CheckpointError
from jaxdebate.model.mesh import replicated
from jaxdebate.rl.grpo import TrainState

REQUIRED_METADATA = ("step", "data", "sampler_version", "ref_version")


@dataclasses.dataclass
class RunState:
    """A run after ``step`` completed steps. ``sampler_source`` is the trainable tree the sampler
    serves (the policy of step ``sampler_version``); ``data`` is :meth:`ItemStream.state`."""

    step: int
    train: TrainState
    rng: jax.Array
    data: dict[str, Any]
    sampler_version: int
    ref_version: int
    sampler_source: Any


def pack(run: RunState, **metadata: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(items, metadata)`` for :meth:`Checkpointer.save`; ``metadata`` adds JSON fields (config)."""
    items: dict[str, Any] = {
        "params": run.train.params,
        "opt_state": run.train.opt_state,
        "opt_step": run.train.step,
        "rng": np.asarray(jax.random.key_data(run.rng)),  # host data: the same on every process
    }
    if run.ref_version != run.step:
        items["ref_params"] = run.train.ref_params
    if run.sampler_version not in (run.step, run.ref_version):
        items["sampler_params"] = run.sampler_source
    meta = {"step": run.step, "data": run.data, "sampler_version": run.sampler_version,
            "ref_version": run.ref_version, **metadata}
    return items, meta


def check_metadata(meta: dict[str, Any], where: str) -> None:
    """CheckpointError naming ``where`` when the metadata lacks a field :func:`unpack` needs."""
    missing = [k for k in REQUIRED_METADATA if k not in meta]
    if missing:
        raise CheckpointError(f"checkpoint {where} is unreadable (metadata): no {', '.join(missing)}")


def restore_target(abstract: TrainState, saved_items: list[str] | set[str], mesh: Any = None) -> dict[str, Any]:
    """The restore target for every item a checkpoint holds, shaped like ``abstract`` (a TrainState
    of ``jax.ShapeDtypeStruct``); with a ``mesh``, every array is restored replicated on it."""
    if mesh is not None:
        abstract = replicated(abstract, mesh)
    target: dict[str, Any] = {
        "params": abstract.params,
        "opt_state": abstract.opt_state,
        "opt_step": abstract.step,
        "rng": np.zeros((2,), np.uint32),
    }
    for name in ("ref_params", "sampler_params"):
        if name in saved_items:
            target[name] = abstract.params
    return target


def unpack(restored: dict[str, Any], meta: dict[str, Any]) -> RunState:
    """The :class:`RunState` of restored items and their metadata (the inverse of :func:`pack`)."""
    policy = restored["params"]
    step = int(meta["step"])
    ref_version, sampler_version = int(meta["ref_version"]), int(meta["sampler_version"])
    ref = restored["ref_params"] if "ref_params" in restored else jax.tree.map(jnp.copy, policy)
    if "sampler_params" in restored:
        served = restored["sampler_params"]
    else:
        served = policy if sampler_version == step else ref
    train = TrainState(params=policy, opt_state=restored["opt_state"], ref_params=ref,
                       step=jnp.asarray(restored["opt_step"], jnp.int32))
    return RunState(step=step, train=train, rng=jax.random.wrap_key_data(jnp.asarray(restored["rng"], jnp.uint32)),
                    data=meta["data"], sampler_version=sampler_version, ref_version=ref_version,
                    sampler_source=served)
