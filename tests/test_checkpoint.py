"""Checkpointer: real orbax checkpoints on disk (save, keep-last-N, restore into targets, errors)."""

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdebate.checkpointer import CheckpointError, Checkpointer


def _state(step):
    params = {"w": jnp.arange(6.0).reshape(2, 3) * step, "b": jnp.ones(3, jnp.bfloat16)}
    opt = optax.adamw(1e-3).init(params)
    return {"params": params, "opt_state": opt, "step": step,
            "rng": jax.random.key_data(jax.random.key(step))}


def test_save_keep_last_and_restore_exactly(tmp_path):
    with Checkpointer(tmp_path / "ck", keep_last=2) as ckpt:
        assert ckpt.latest_step() is None
        for step in (1, 2, 3):
            ckpt.save(step, _state(step), {"data": {"position": step * 10}, "version": step - 1})
        assert ckpt.all_steps() == [2, 3]
        assert sorted(p.name for p in (tmp_path / "ck").iterdir() if p.name.isdigit()) == ["2", "3"]
    # a fresh manager (as after a restart) sees the same steps
    with Checkpointer(tmp_path / "ck", keep_last=2) as ckpt:
        assert ckpt.latest_step() == 3
        target = jax.eval_shape(lambda: _state(0))
        state, meta = ckpt.restore(2, target={"opt_state": target["opt_state"], "params": target["params"]})
        assert meta == {"data": {"position": 20}, "version": 1}
        assert set(state) == {"opt_state", "params"}
        assert isinstance(state["opt_state"], tuple)  # the optax structure, not plain lists
        np.testing.assert_array_equal(state["params"]["w"], np.arange(6.0).reshape(2, 3) * 2)
        assert state["params"]["b"].dtype == jnp.bfloat16
        full, _ = ckpt.restore()
        assert int(full["step"]) == 3
        np.testing.assert_array_equal(full["rng"], jax.random.key_data(jax.random.key(3)))


def test_restore_errors_name_the_problem(tmp_path):
    with Checkpointer(tmp_path, keep_last=1) as ckpt:
        with pytest.raises(CheckpointError, match="no checkpoint"):
            ckpt.restore()
        ckpt.save(5, {"params": {"w": jnp.zeros(2)}}, {})
        with pytest.raises(CheckpointError, match="step 4"):
            ckpt.restore(4)
        with pytest.raises(CheckpointError, match="ref_params"):
            ckpt.restore(items=["ref_params"])
    with pytest.raises(CheckpointError, match="not found"):
        Checkpointer(tmp_path / "missing", create=False)


def _largest_data_file(step_dir):
    files = [p for p in (step_dir / "params").rglob("*") if p.is_file() and p.parent.name == "d"]
    return max(files, key=lambda p: p.stat().st_size)


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {  # issue 14 item 1: what a preempted job or a bad disk leaves behind
    "truncated data file": lambda d: _truncate(_largest_data_file(d / "4")),
    "deleted metadata": lambda d: (d / "4" / "metadata" / "metadata").unlink(),
    "empty manifest": lambda d: (d / "4" / "params" / "manifest.ocdbt").write_bytes(b""),
    "empty step directory": lambda d: [shutil.rmtree(d / "4"), (d / "4").mkdir()],
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_damaged_read_is_a_checkpoint_error_naming_the_step(tmp_path, damage):
    ck = tmp_path / "ck"
    with Checkpointer(ck, keep_last=2) as ckpt:
        for step in (2, 4):
            ckpt.save(step, {"params": {"w": jnp.arange(4096.0) * step}}, {"step": step})
    DAMAGE[damage](ck)
    with Checkpointer(ck, keep_last=2, create=False) as ckpt:
        assert ckpt.latest_step() == 4
        with pytest.raises(CheckpointError) as info:
            state, _ = ckpt.restore(target={"params": {"w": jax.ShapeDtypeStruct((4096,), jnp.float32)}})
            np.asarray(state["params"]["w"])
        message = str(info.value)
        assert f"checkpoint {ck / '4'} is unreadable" in message and "\n" not in message, message
        state, meta = ckpt.restore(2)  # the older step is intact and still reads
        np.testing.assert_array_equal(state["params"]["w"], np.arange(4096.0) * 2)
        assert meta == {"step": 2}
        (tmp_path / "aside" / "4").mkdir(parents=True)  # an earlier damaged step 4 is kept too
        moved = ckpt.move_aside(4, tmp_path / "aside")  # kept for inspection, out of orbax's way
        assert moved == tmp_path / "aside" / "4.2" and moved.is_dir() and ckpt.all_steps() == [2]
