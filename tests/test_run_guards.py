"""What a run refuses to do (issue 23): apply or checkpoint a diverged update, share its workdir with
a second trainer, resume silently with another config or another architecture, or write a checkpoint
to a full disk without saying so. Each through the real launcher on the tiny smoke model."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxdebate.checkpoint import restore
from jaxdebate.checkpointer import CheckpointError, Checkpointer
from jaxdebate.errors import RunError
from jaxdebate.launch import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, main
from jaxdebate.metrics import read_metrics
from jaxdebate.rl.config_history import HISTORY_FILE, check_model
from jaxdebate.workdir_lock import LOCK_FILE

QUICK = ["training.validation_every_steps=0", "training.checkpoint_every_steps=1", "logging.progress_bar=false",
         "training.train_batch_size=1", "sampler.max_new_tokens=8"]


def _launch(workdir, *overrides, flags=()):
    return main(["--config", "configs/smoke.py", "--workdir", str(workdir), *flags, "--set", *QUICK, *overrides])


def _finite(tree) -> bool:
    return all(bool(np.isfinite(np.asarray(x)).all()) for x in jax.tree.leaves(tree))


def test_a_diverged_update_is_not_applied_and_the_run_stops_naming_step_and_metric(tmp_path, capsys):
    # learning rate 10 without warm-up: update 2's loss is non-finite (found by trying)
    workdir = tmp_path / "run"
    code = _launch(workdir, "training.train_batch_size=2", "sampler.max_new_tokens=16", "optimizer.peak_lr=10",
                   "optimizer.end_lr=10", "optimizer.warmup_steps=0", "training.total_train_steps=4",
                   "training.nonfinite_patience=1")
    err = capsys.readouterr().err
    assert code == EXIT_ERROR
    line = next(x for x in err.splitlines() if x.startswith("error:"))
    assert "step 2: non-finite" in line and "loss" in line and "none applied" in line
    rows = read_metrics(workdir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["learner/updated"] == 1.0 and rows[1]["learner/updated"] == 0.0
    assert rows[1]["learner/nonfinite/loss"] == 1.0
    with Checkpointer(workdir / "checkpoints", create=False) as ckpt:
        assert ckpt.all_steps() == [1]  # the diverged step never became a checkpoint
    params, _ = restore(workdir)
    assert _finite(params)


def test_restore_and_eval_refuse_non_finite_parameters(tmp_path, capsys):
    from jaxdebate.configlib import load_config
    from jaxdebate.configlib import to_dict
    from jaxdebate import eval as evaluate

    workdir = tmp_path / "diverged"
    params = {"w": np.full((4, 4), np.nan, np.float32)}
    with Checkpointer(workdir / "checkpoints") as ckpt:
        ckpt.save(3, {"params": params}, {"step": 3, "config": to_dict(load_config("configs/smoke.py", []))})
    with pytest.raises(CheckpointError, match="step 3 holds non-finite parameters"):
        restore(workdir)
    assert evaluate.main(["--model", str(workdir), "--data", "arithmetic:n=2", "--n", "2"]) == 2
    assert "non-finite parameters" in capsys.readouterr().err


def test_a_second_trainer_on_a_workdir_exits_2_naming_the_holder(tmp_path, capsys):
    workdir = tmp_path / "run"
    workdir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (workdir / LOCK_FILE).write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                                     "started": 0}))
        assert _launch(workdir, "training.total_train_steps=1") == EXIT_CONFIG
        err = capsys.readouterr().err
        assert f"in use by pid {holder.pid}" in err and "Traceback" not in err
        assert not (workdir / "checkpoints").exists()  # nothing was loaded or written
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone: its lock is stale, taken over and released at the end
    assert _launch(workdir, "training.total_train_steps=1") == EXIT_OK
    assert "removing the stale lock" in capsys.readouterr().err
    assert not (workdir / LOCK_FILE).exists()


def test_a_lock_held_on_another_host_says_how_to_clear_it_if_that_host_is_gone(tmp_path):
    from jaxdebate.errors import RunError
    from jaxdebate.workdir_lock import WorkdirLock

    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": 1234, "host": "node-7-not-" + socket.gethostname(),
                                                  "started": 0}))
    with pytest.raises(RunError, match=rf"in use by pid 1234 on node-7-.*if it is gone .*delete {tmp_path / LOCK_FILE}"):
        WorkdirLock(tmp_path).acquire()
    assert (tmp_path / LOCK_FILE).exists()  # never removed on a guess


def test_a_checkpoint_resumes_only_with_its_model_architecture():
    saved = {"hidden_size": 64, "head_dim": 16, "dtype": "float32", "dot_dtype": "compute", "remat": False}
    check_model(None, saved, 3)  # a checkpoint without the record: not checked
    check_model(saved, {**saved, "dtype": "bfloat16", "dot_dtype": "bfloat16", "remat": True}, 3)  # how to compute
    with pytest.raises(RunError, match=r"differs from the one step 3 was trained with \(head_dim: 16 -> 64\)"):
        check_model(saved, {**saved, "head_dim": 64}, 3)


def test_resume_refuses_a_changed_config_unless_allowed_and_records_it(tmp_path, capsys):
    workdir = tmp_path / "run"
    assert _launch(workdir, "training.total_train_steps=1") == EXIT_OK
    first = (workdir / "config.json").read_text()
    capsys.readouterr()

    # a learning-rate change would mix two experiments in one run: refused, listing the field
    assert _launch(workdir, "training.total_train_steps=1", "optimizer.peak_lr=1e-3", "model.dot_dtype=bfloat16") == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "optimizer.peak_lr: 0.0001 -> 0.001" in err and "--allow-config-change" in err
    assert "model.dot_dtype: 'compute' -> 'bfloat16'" in err
    # another architecture: refused too, naming model.source; with the flag, naming the model fields
    tiny64 = "model.source=tiny:hidden=128,heads=2,kv_heads=1"
    assert _launch(workdir, "training.total_train_steps=1", tiny64) == EXIT_CONFIG
    assert "model.source" in capsys.readouterr().err
    assert _launch(workdir, "training.total_train_steps=1", tiny64, flags=["--allow-config-change"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "model architecture differs" in err and "head_dim: 16 -> 64" in err and "Traceback" not in err
    assert not (workdir / HISTORY_FILE).exists()

    # a longer run is a safe change; an allowed learning-rate change is recorded, never rewritten; so is
    # one of how to compute (bf16 matmul operands): it is not a change of architecture
    assert _launch(workdir, "training.total_train_steps=2") == EXIT_OK
    assert _launch(workdir, "training.total_train_steps=2", "optimizer.peak_lr=1e-3", "model.dot_dtype=bfloat16",
                   flags=["--allow-config-change"]) == EXIT_OK
    assert (workdir / "config.json").read_text() == first
    history = [json.loads(x) for x in (workdir / HISTORY_FILE).read_text().splitlines()]
    assert [h["from_step"] for h in history] == [1, 2]
    assert history[0]["changed"] == [{"field": "training.total_train_steps", "before": 1, "after": 2}]
    assert sorted(history[1]["changed"], key=lambda c: c["field"]) == [
        {"field": "model.dot_dtype", "before": "compute", "after": "bfloat16"},
        {"field": "optimizer.peak_lr", "before": 1e-4, "after": 1e-3}]
    assert history[1]["config"]["optimizer"]["peak_lr"] == 1e-3


def test_a_full_disk_while_checkpointing_is_one_line_naming_the_path(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs here (needs root): {made.stderr.decode().strip()}")
    try:
        with Checkpointer(mount / "checkpoints") as ckpt:
            ckpt.save(1, {"params": {"w": np.ones((64,), np.float32)}}, {"step": 1})
            with pytest.raises(CheckpointError) as info:
                noise = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB, incompressible
                ckpt.save(2, {"params": {"w": noise}}, {"step": 2})
            message = str(info.value)
            assert "disk holding" in message and str(mount / "checkpoints") in message and "full" in message
            assert "newest complete checkpoint is step 1" in message and "\n" not in message
            assert ckpt.all_steps() == [1]
        assert not list((mount / "checkpoints").glob("2.orbax-checkpoint-tmp*"))  # the partial step is gone
    finally:
        subprocess.run(["umount", str(mount)], check=False)
