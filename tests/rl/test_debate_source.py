"""``DebateSource``: a draw ahead takes the same items and seeds as drawing when asked, records the
position before it, surfaces its error where it is taken; and ``training.sample_ahead`` on the real
trainer (tiny model, in-process JAX sampler): the next step's debates are played while a step learns,
on the weights of the step before (one step off-policy), and a run resumed from a checkpoint written
while debates were in flight ends bit-identical to the run that went straight through."""

import shutil
import threading

import jax
import numpy as np
import pytest

from jaxdebate.checkpoint import restore
from jaxdebate.checkpointer import Checkpointer
from jaxdebate.configlib import load_config
from jaxdebate.data import Item, ItemStream
from jaxdebate.metrics import read_metrics
from jaxdebate.rl.debate_source import DebateSource
from jaxdebate.rl.step_metrics import NONDETERMINISTIC_PREFIXES

STEPS = 3
COMMON = [
    f"training.total_train_steps={STEPS}", "training.train_batch_size=1", "sampler.max_new_tokens=8",
    "training.validation_every_steps=2", "data.validation_size=2", "training.checkpoint_every_steps=1",
    "checkpoint.n_last_ckpts_to_keep=8", "training.hard_update_ref_every_steps=1", "logging.progress_bar=false",
    "logging.tensorboard=false", "optimizer.warmup_steps=0", "optimizer.peak_lr=3e-3", "optimizer.end_lr=1e-3",
]


def _train(workdir, *overrides):
    from jaxdebate.train import Trainer

    result = Trainer(load_config("configs/smoke.py", [*COMMON, *overrides]), workdir).run()
    assert result.status == "finished" and result.step == STEPS
    return {r["step"]: r for r in read_metrics(workdir)}


ITEMS = [Item(f"q{i}", f"{i} + 1", str(i + 1)) for i in range(5)]


def _played(items, seed):
    """What a play returns here: which items with which seed, on which thread."""
    return [item.id for item in items], seed, threading.current_thread().name


def test_a_draw_ahead_is_the_draw_it_replaces_and_the_run_records_the_position_before_it():
    now, ahead = DebateSource(ItemStream(ITEMS, 2, seed=7), _played), DebateSource(ItemStream(ITEMS, 2, seed=7), _played)
    rng = jax.random.key(0)
    first_now, first_ahead = now.take(rng), ahead.take(rng)
    ahead.start(first_ahead.rng)
    assert ahead.ahead and ahead.stream.state()["position"] == 4  # the stream moved on for the draw ahead
    second_now, second_ahead = now.take(first_now.rng), ahead.take(first_ahead.rng)
    for a, b in ((first_now, first_ahead), (second_now, second_ahead)):
        assert a.batch[:2] == b.batch[:2] and a.data == b.data  # same items and seed; same position after
        np.testing.assert_array_equal(jax.random.key_data(a.rng), jax.random.key_data(b.rng))
    assert first_ahead.data["position"] == 2 and second_ahead.batch[2].startswith("sample-ahead")
    assert not ahead.ahead
    # a process that does not sample draws all the same (None batches), so it stays at the same position
    silent = DebateSource(ItemStream(ITEMS, 2, seed=7), None)
    drawn = silent.take(rng)
    silent.start(drawn.rng)
    assert silent.take(drawn.rng).batch is None and silent.stream.state() == ahead.stream.state()
    # a resumed stream (the position before the draw ahead) draws what was ahead again
    resumed = ItemStream(ITEMS, 2, seed=7)
    resumed.restore(first_ahead.data)
    assert DebateSource(resumed, _played).take(first_ahead.rng).batch[:2] == second_ahead.batch[:2]
    now.close()
    ahead.close()


def test_an_error_ahead_is_raised_where_it_is_taken_and_close_drops_a_job_in_flight():
    def failing(items, seed):
        raise ValueError(f"no debates for {items[0].id}")

    source = DebateSource(ItemStream(ITEMS, 2, seed=7), failing)
    source.start(jax.random.key(0))
    source.settle()  # done, and the error is kept for the step that takes it
    with pytest.raises(ValueError, match="no debates for"):
        source.take(jax.random.key(0))
    source.close()
    release, started = threading.Event(), threading.Event()

    def slow(items, seed):
        started.set()
        release.wait(timeout=30)
        return seed

    source = DebateSource(ItemStream(ITEMS, 2, seed=7), slow)
    source.start(jax.random.key(0))
    with pytest.raises(RuntimeError, match="already ahead"):
        source.start(jax.random.key(0))
    assert started.wait(timeout=30)
    threading.Timer(0.2, release.set).start()  # the sampler closing makes a real job fail soon after
    source.close()  # waits for the worker, drops its result
    assert not source.ahead


def _deterministic(record):
    return {k: v for k, v in record.items() if not k.startswith(NONDETERMINISTIC_PREFIXES)}


@pytest.mark.slow
def test_sample_ahead_is_one_step_off_policy_and_resumes_exactly(tmp_path):
    ahead = _train(tmp_path / "ahead", "training.sample_ahead=true", "training.export_every_steps=1")
    # an on-policy run whose sampler syncs every second step samples step 2 on the step-0 weights too
    lagging = _train(tmp_path / "lagging", "training.export_every_steps=2")

    # step t's debates were played on the weights after step t - 2 (the sampler's lag is 1 from step 2)
    assert [ahead[s]["weights/sampler_lag"] for s in range(1, STEPS + 1)] == [0, 1, 1]
    assert [lagging[s]["weights/sampler_lag"] for s in range(1, STEPS + 1)] == [0, 1, 0]
    # steps 1 and 2 are the same debates on the same weights with the same seeds: the same updates,
    # and the step-2 validation sees the same policy (the sync due at step 2 was made for it)
    for s in (1, 2):
        assert ahead[s]["train/samples_fingerprint"] == lagging[s]["train/samples_fingerprint"]
        assert ahead[s]["learner/grad_norm"] == lagging[s]["learner/grad_norm"]
    rows = "validation/step_2.jsonl"  # per item: the greedy answers
    assert (tmp_path / "ahead" / rows).read_text() == (tmp_path / "lagging" / rows).read_text()
    assert ahead[2]["val/weight_version"] == lagging[2]["val/weight_version"] == 2
    assert ahead[3]["val/weight_version"] == 3  # the last step's weights are synced before the end
    assert ahead[3]["learner/grad_norm"] != lagging[3]["learner/grad_norm"]  # step 3 parts: other weights

    # resume from the step-2 checkpoint, written while step 3's debates were being played
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "ahead", resumed)
    shutil.rmtree(resumed / "checkpoints" / "3")
    again = _train(resumed, "training.sample_ahead=true", "training.export_every_steps=1")
    assert sorted(again) == list(range(1, STEPS + 1))
    for s in range(1, STEPS + 1):
        assert _deterministic(again[s]) == _deterministic(ahead[s]), f"step {s} differs"
    (p1, c1), (p2, c2) = restore(tmp_path / "ahead"), restore(resumed)
    assert c1 == c2
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    # an export due at the step before the last, with no validation there: the last step, which
    # starts nothing ahead, still makes that sync, so the final validation sees it as on-policy does
    late = _train(tmp_path / "late", "training.sample_ahead=true", "training.export_every_steps=2",
                  f"training.validation_every_steps={STEPS}")
    assert late[STEPS]["val/weight_version"] == lagging[STEPS]["val/weight_version"] == 2
    with Checkpointer(tmp_path / "late" / "checkpoints") as ckpt:
        assert ckpt.metadata(STEPS)["sampler_version"] == 2
