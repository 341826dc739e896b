"""The trainer's metric assembly as pure functions: a hand-built debate batch in, known values out."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jaxdebate.data.items import Item
from jaxdebate.debate.batch import DebateBatch, Turn
from jaxdebate.rl.step_metrics import NONDETERMINISTIC_PREFIXES, samples_fingerprint, timing_metrics, train_metrics


def _batch() -> DebateBatch:
    """1 item x 2 rollouts x 2 agents x 1 round; rollout 1's agent 1 did not play."""
    correct = np.array([[[[1.0], [0.0]], [[1.0], [0.0]]]], np.float32)
    active = np.array([[[[True], [True]], [[True], [False]]]])
    votes = np.array([[[[0], [1]], [[0], [-1]]]], np.int32)
    turns = tuple(
        Turn(index=(0, g, a, 0), item_id="q", prompt_ids=(1, 2), completion_ids=(3,) * n, logprobs=(-0.5,) * n,
             truncated=False, weight_version=version, text="", answer=None)
        for (g, a, n, version) in ((0, 0, 4, 2), (0, 1, 6, 3), (1, 0, 2, 3))
    )
    item = Item(id="q", problem="1+1", answer="2", env="math")
    return DebateBatch(items=(item,), env_names=("math_debate",), correct=correct, votes=votes,
                       gold=np.array([0], np.int32), active=active, turns=turns, classes=(("2", "3"),),
                       stats={"no_answer": 1, "completion_tokens": 12, "mean_in_flight": 2.5})


def test_train_metrics_from_a_known_batch():
    adv = np.array([[[[0.5], [-1.5]], [[1.0], [9.0]]]], np.float32)  # 9.0 sits on an inactive turn
    m = train_metrics(
        _batch(), reward={"reward/raw/mean": 0.5}, advantages=adv,
        filters={"zero_advantage_fraction": 0.0, "truncated_fraction": 0.25, "kept_fraction": 0.75, "n_kept": 3},
        learner={"loss": 0.125}, layout={"samples": 3, "sequence_tokens": 18}, updated=True, step=4,
        sampler_version=3, ref_version=0, sampler_stats={"sync/seconds": 0.2, "sync/version": 4, "restarts": 1},
    )
    assert m["train/reward/raw/mean"] == 0.5
    assert m["train/accuracy"] == pytest.approx(2 / 3)  # active turns: 1, 0, 1
    assert m["train/debate_accuracy"] == pytest.approx(1.0)  # both rollouts' plurality is class 0 = gold
    assert m["train/advantage_abs_mean"] == pytest.approx((0.5 + 1.5 + 1.0) / 3)
    assert m["train/no_answer_fraction"] == pytest.approx(1 / 3)
    assert m["train/completion_tokens_mean"] == pytest.approx(4.0)
    assert m["train/samples_fingerprint"] == samples_fingerprint(_batch())
    assert m["train/kept_fraction"] == 0.75 and m["train/n_kept"] == 3.0
    assert m["sampler/concurrency"] == 2.5
    assert m["learner/loss"] == 0.125 and m["learner/updated"] == 1.0
    assert m["batch/sequence_tokens"] == 18.0
    assert m["weights/sampler_version"] == 3.0 and m["weights/ref_version"] == 0.0
    assert m["weights/sampler_lag"] == 1.0  # step 4 learned from turns sampled with version 2
    assert m["sync/seconds"] == 0.2 and "sync/version" not in m and m["restarts"] == 1.0
    assert all(type(v) is float for v in m.values())


def test_samples_fingerprint_sees_every_token_and_position_but_not_the_turn_order():
    b = _batch()
    fp = samples_fingerprint(b)
    assert _exact_float(fp) and fp == samples_fingerprint(dataclasses.replace(b, turns=b.turns[::-1]))
    changed = (dataclasses.replace(b.turns[0], completion_ids=(3, 3, 3, 4)),) + b.turns[1:]
    assert samples_fingerprint(dataclasses.replace(b, turns=changed)) != fp  # one token
    moved = (dataclasses.replace(b.turns[0], index=(0, 1, 1, 0)),) + b.turns[1:]
    assert samples_fingerprint(dataclasses.replace(b, turns=moved)) != fp  # same tokens, another agent
    split = (dataclasses.replace(b.turns[0], completion_ids=(3, 3)),
             dataclasses.replace(b.turns[1], completion_ids=(3,) * 8)) + b.turns[2:]
    assert samples_fingerprint(dataclasses.replace(b, turns=split)) != fp  # same token stream, other cuts


def _exact_float(x: float) -> bool:
    return isinstance(x, float) and 0 <= x < 2**48 and float(int(x)) == x


def test_an_empty_batch_and_an_older_sync_give_zeros_not_errors():
    b = _batch()
    empty = DebateBatch(items=b.items, env_names=b.env_names, correct=b.correct, votes=b.votes, gold=b.gold,
                        active=np.zeros_like(b.active), turns=(), classes=b.classes, stats={})
    m = train_metrics(
        empty, reward={}, advantages=np.zeros(b.correct.shape, np.float32),
        filters={"zero_advantage_fraction": 1.0, "truncated_fraction": 0.0, "kept_fraction": 0.0, "n_kept": 0},
        learner={}, layout={}, updated=False, step=2, sampler_version=0, ref_version=0,
        sampler_stats={"sync/seconds": 0.2, "sync/version": 1},
    )
    assert m["train/accuracy"] == 0.0 and m["train/advantage_abs_mean"] == 0.0
    assert m["weights/sampler_lag"] == 0.0 and m["learner/updated"] == 0.0
    assert "sync/seconds" not in m  # that sync belongs to step 1


def test_timing_metrics():
    m = timing_metrics({"sampling": 4.0, "learning": 2.0, "validation": 1.0}, step_seconds=8.0,
                       sampled_tokens=400.0, learner_tokens=100.0)
    assert m["time/sampling"] == 4.0 and m["time/step"] == 9.0
    assert m["throughput/sampled_tokens_per_s"] == 100.0
    assert m["throughput/learner_tokens_per_s"] == 50.0
    assert m["throughput/tokens_per_s"] == 50.0
    assert all(k.startswith(NONDETERMINISTIC_PREFIXES) for k in m)
    assert timing_metrics({}, step_seconds=0.0, sampled_tokens=0.0, learner_tokens=0.0)["time/step"] == 0.0
