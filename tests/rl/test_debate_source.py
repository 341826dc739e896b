"""``training.sample_ahead`` on the real trainer (tiny model, in-process JAX sampler): the next step's
debates are played while a step learns, on the weights of the step before (one step off-policy), and a
run resumed from a checkpoint written while debates were in flight ends bit-identical to the run that
went straight through."""

import shutil

import jax
import numpy as np
import pytest

from jaxdebate.checkpoint import restore
from jaxdebate.configlib import load_config
from jaxdebate.metrics import read_metrics
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
