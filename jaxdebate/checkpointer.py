"""orbax checkpoints: a small ``Checkpointer`` over ``CheckpointManager`` (what the trainers save and
resume with). A run's policy and config for notebooks: :mod:`jaxdebate.checkpoint`.

A checkpoint is one step directory holding one orbax item per top-level key of the saved state
(``params``, ``opt_state``, ``ref_params``, ...) plus a JSON ``metadata`` item (step, data position,
sampler weight version, the config as a plain dict). Items are separate so a notebook can load the
policy's parameters without reading the optimiser state.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxdebate.errors import ConfigError, JaxDebateError

CHECKPOINT_SUBDIR = "checkpoints"
# what to do with a workdir whose checkpoints cannot or must not be resumed
START_OVER = f"use another workdir, or move its {CHECKPOINT_SUBDIR}/ aside to start over in it"
_METADATA = "metadata"
_ITEMS_KEY = "__items__"
_LEAF_KEY = "__leaf__"


class CheckpointError(JaxDebateError):
    """A checkpoint directory that is missing, empty or unreadable."""


def _reason(error: BaseException) -> str:
    """A one-line, bounded description of an orbax/tensorstore error (theirs span many lines)."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else ""
    return f"{type(error).__name__}: {text[:300]}{'...' if len(text) > 300 or len(lines) > 1 else ''}"


def _disk_full(error: BaseException | None) -> bool:
    """True when ``error`` (or one it was raised from) says the disk is full."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(error)
        if "No space left" in text or "RESOURCE_EXHAUSTED" in text or "ENOSPC" in text:
            return True
        error = error.__cause__ or error.__context__
    return False


def _collect_quietly() -> None:
    """Finalise what a failed orbax read leaves behind now, without printing: its abandoned async
    reads otherwise print "Exception ignored ... Traceback" whenever the garbage collector meets them."""
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    try:
        gc.collect()
    finally:
        sys.unraisablehook = previous


def _ocp():
    import orbax.checkpoint as ocp

    # orbax logs every save/restore at INFO and warns about items it was not asked to restore.
    logging.getLogger("absl").setLevel(logging.ERROR)
    return ocp


def _is_container(x: Any) -> bool:
    return isinstance(x, (Mapping, list, tuple)) and len(x) > 0


class Checkpointer:
    """Save and restore ``{item_name: pytree}`` states with JSON metadata, keeping the last ``keep_last``.

    ``save(step, state, metadata)`` writes synchronously (a step directory appears only once complete,
    so a process killed mid-save leaves the previous checkpoint intact).
    """

    def __init__(self, directory: str | Path, keep_last: int = 2, *, create: bool = True) -> None:
        if keep_last < 1:
            raise ConfigError(f"checkpoint.n_last_ckpts_to_keep must be >= 1, got {keep_last}")
        ocp = _ocp()
        self.directory = Path(directory).expanduser().resolve()
        if create:
            self.directory.mkdir(parents=True, exist_ok=True)
        elif not self.directory.is_dir():
            raise CheckpointError(f"checkpoint directory not found: {self.directory}")
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep_last, create=create, enable_async_checkpointing=False
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, state: Mapping[str, Any], metadata: Mapping[str, Any] | None = None,
             force: bool = False) -> bool:
        """Write ``state`` (a dict of pytrees; leaves of jax/numpy arrays or scalars) at ``step``."""
        ocp = _ocp()
        if not isinstance(state, Mapping) or not state:
            raise TypeError("Checkpointer.save expects a non-empty dict {item_name: pytree}")
        if _METADATA in state:
            raise ValueError(f"'{_METADATA}' is reserved for the JSON metadata item")
        meta = dict(metadata or {})
        meta[_ITEMS_KEY] = sorted(state)
        args = {}
        for name, tree in state.items():
            tree = tree if _is_container(tree) else {_LEAF_KEY: tree}
            args[name] = ocp.args.StandardSave(jax.tree.map(_savable, tree))
        args[_METADATA] = ocp.args.JsonSave(_jsonable(meta))
        try:
            saved = self._manager.save(int(step), args=ocp.args.Composite(**args), force=force)
            self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - orbax/tensorstore raise anything; one line instead
            _collect_quietly()
            for partial in self.directory.glob(f"{int(step)}.orbax-checkpoint-tmp*"):
                shutil.rmtree(partial, ignore_errors=True)  # a half-written step frees its space
            raise CheckpointError(self._save_failure(int(step), e)) from None
        return bool(saved)

    def _save_failure(self, step: int, error: BaseException) -> str:
        newest = max(self.all_steps(), default=None)
        kept = f"the newest complete checkpoint is step {newest}" if newest is not None else "no checkpoint is complete"
        if _disk_full(error):
            usage = shutil.disk_usage(self.directory)
            return (f"checkpoint step {step} could not be written: the disk holding {self.directory} is full "
                    f"({usage.free / 2**20:.1f} MiB free of {usage.total / 2**30:.2f} GiB); {kept} (a rerun "
                    f"resumes from it once space is freed)")
        return f"checkpoint step {step} could not be written to {self.directory}: {_reason(error)}; {kept}"

    def _resolve_step(self, step: int | None) -> int:
        steps = self.all_steps()
        if not steps:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        if step is None:
            return steps[-1]
        if int(step) not in steps:
            raise CheckpointError(f"no checkpoint for step {step} in {self.directory} (have {steps})")
        return int(step)

    def step_dir(self, step: int) -> Path:
        """The directory of one checkpointed step (named in every read error)."""
        return self.directory / str(int(step))

    def reload(self) -> None:
        """Re-read the list of steps from disk (after a step directory was moved away)."""
        self._manager.reload()

    def move_aside(self, step: int, destination: Path) -> Path:
        """Move a (damaged) step's directory into ``destination`` instead of deleting it; the new path."""
        destination.mkdir(parents=True, exist_ok=True)
        target = destination / str(int(step))
        n = 1
        while target.exists():
            n += 1
            target = destination / f"{int(step)}.{n}"
        shutil.move(str(self.step_dir(step)), str(target))
        self.reload()
        return target

    def restore_newest(self, restore_step: Callable[[int], None], aside: Path, *, move: bool = True) -> int | None:
        """Call ``restore_step`` on the newest step, then older ones while it raises CheckpointError;
        the step that restored, or None when there is none.

        Damaged newer steps (a job killed mid-write, a truncated file) are named in one line each and
        moved into ``aside`` (kept, never deleted; out of the way of the step's re-save and of orbax's
        keep-last clean-up) once an older step has restored (by one process of a multi-process run:
        ``move`` is False on the others). When no step restores, nothing is moved and the
        CheckpointError lists each step's reason.
        """
        failed: list[tuple[int, CheckpointError]] = []
        for step in reversed(self.all_steps()):
            try:
                restore_step(step)
            except CheckpointError as e:
                failed.append((step, e))
                continue
            for bad, error in failed:
                if not move:
                    continue
                moved = self.move_aside(bad, aside)
                print(f"[jaxdebate] skipped unreadable checkpoint step {bad} ({error}); moved it to {moved}; "
                      f"resuming from step {step}", file=sys.stderr)
            return step
        if failed:
            reasons = "; ".join(str(e) for _, e in failed)
            raise CheckpointError(f"no readable checkpoint in {self.directory} (nothing was moved "
                                  f"or deleted; {START_OVER}): {reasons}")
        return None

    def metadata(self, step: int | None = None) -> dict[str, Any]:
        ocp = _ocp()
        step = self._resolve_step(step)
        failure = None
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(**{_METADATA: ocp.args.JsonRestore()}))
            meta = out[_METADATA]
        except Exception as e:  # noqa: BLE001 - orbax raises anything from KeyError to bare Exception
            failure = f"checkpoint {self.step_dir(step)} is unreadable (metadata): {_reason(e)}"
        if failure is not None:
            _collect_quietly()
            raise CheckpointError(failure)
        if not isinstance(meta, Mapping):
            raise CheckpointError(f"checkpoint {self.step_dir(step)} is unreadable (metadata): not a JSON object")
        return dict(meta)

    def restore(self, step: int | None = None, target: Mapping[str, Any] | None = None,
                items: Iterable[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(state, metadata)`` of ``step`` (default: the latest).

        ``target`` maps item names to pytrees (concrete or ``jax.ShapeDtypeStruct``) giving the structure,
        dtypes and shardings to restore into; items absent from ``target`` come back as saved (nested
        dicts/lists of arrays) on this process's first device, whatever mesh saved them (a notebook
        reads a multi-device run). ``items`` restricts which items are read (default: all, or ``target``'s).
        """
        ocp = _ocp()
        step = self._resolve_step(step)
        meta = self.metadata(step)
        saved_items = list(meta.pop(_ITEMS_KEY, []))
        target = dict(target or {})
        wanted = list(items) if items is not None else (list(target) if target else saved_items)
        missing = [name for name in wanted if name not in saved_items]
        if missing:
            raise CheckpointError(
                f"checkpoint step {step} in {self.directory} has no item(s) {missing} (has {saved_items})"
            )
        args = {}
        wrapped = {}
        for name in wanted:
            tgt = target.get(name)
            if tgt is not None:
                wrapped[name] = not _is_container(tgt)
                tgt = {_LEAF_KEY: tgt} if wrapped[name] else tgt
                args[name] = ocp.args.StandardRestore(jax.tree.map(_restore_target, tgt))
            else:
                args[name] = ocp.args.StandardRestore(self._local_target(step, name))
        failure = None
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(**args))
        except Exception as e:  # noqa: BLE001 - damaged files, or a target that does not match
            failure = f"checkpoint {self.step_dir(step)} is unreadable (items {wanted}): {_reason(e)}"
        if failure is not None:
            _collect_quietly()
            raise CheckpointError(failure)
        state = {}
        for name in wanted:
            tree = out[name]
            if isinstance(tree, Mapping) and set(tree) == {_LEAF_KEY}:
                tree = tree[_LEAF_KEY]
            state[name] = tree
        return state, meta

    def _local_target(self, step: int, name: str) -> Any:
        """Item ``name`` as saved (shapes, dtypes), placed on this process's first device; None (orbax's
        own default) when its metadata cannot be read, so the restore reports the damage."""
        try:
            tree = _ocp().StandardCheckpointer().metadata(self.step_dir(step) / name).item_metadata.tree
        except Exception:  # noqa: BLE001 - missing/damaged metadata: let the restore itself fail clearly
            return None
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        return jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), tree)

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _savable(x: Any) -> Any:
    if isinstance(x, (bool, int, float)):
        return np.asarray(x)
    return x


def _restore_target(x: Any) -> Any:
    if isinstance(x, (bool, int, float)):
        return np.asarray(x)
    return x


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (np.ndarray, jax.Array)):
        return np.asarray(x).tolist()
    return x


def checkpoint_dir(workdir: str | Path) -> Path:
    return Path(workdir).expanduser().resolve() / CHECKPOINT_SUBDIR


def open_run(workdir: str | Path) -> Checkpointer:
    """The Checkpointer of a run's workdir (CheckpointError when it has none)."""
    directory = checkpoint_dir(workdir)
    if not directory.is_dir():
        raise CheckpointError(f"{workdir} has no '{CHECKPOINT_SUBDIR}' directory (is it a run's workdir?)")
    return Checkpointer(directory, create=False)


def latest_step(workdir: str | Path) -> int | None:
    """The newest checkpointed step of a run's workdir, or None."""
    directory = checkpoint_dir(workdir)
    if not directory.is_dir():
        return None
    with contextlib.closing(Checkpointer(directory, create=False)) as ckpt:
        return ckpt.latest_step()


__all__ = ["CHECKPOINT_SUBDIR", "START_OVER", "CheckpointError", "Checkpointer", "checkpoint_dir", "latest_step",
           "open_run"]
