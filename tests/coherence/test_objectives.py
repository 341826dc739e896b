"""Issue 28's training: the RPO and SFT objectives, per-epoch validation on held-out pairs, and early
stopping on held-out accuracy that exports the best epoch's adapter (real tiny model, real orbax)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.checkpointer import Checkpointer
from jaxdebate.coherence import batching, train, validation
from jaxdebate.coherence.config import CoherenceConfig
from jaxdebate.coherence.dpo import objective_loss
from jaxdebate.configlib import apply_overrides
from jaxdebate.data.stream import epoch_order
from jaxdebate.errors import ConfigError
from jaxdebate.model import lora, peft_export

from dpo_fixtures import PAIRS, tiny_cfg

HELDOUT = [
    {"question": "What is 4+4?", "chosen": "4 plus 4 makes 8.\nAnswer: 8", "rejected": "Perhaps 9.\nAnswer: 9"},
    {"question": "What is 2+5?", "chosen": "2 plus 5 makes 7.\nAnswer: 7", "rejected": "Say 6.\nAnswer: 6"},
]


def test_objective_losses_by_hand():
    pc, pr, rc, rr = jnp.array([-10.0, -5.0]), jnp.array([-12.0, -4.0]), jnp.array([-11.0, -5.0]), jnp.array([-11.0, -5.0])
    tokens = jnp.array([4, 2])
    dpo = (0.5981388693 + 0.7443966600) / 2  # the hand-computed DPO losses of tests/coherence/test_dpo.py
    nll = (10.0 / 4 + 5.0 / 2) / 2  # per-token NLL of each chosen completion, averaged over pairs
    loss, m = objective_loss(pc, pr, rc, rr, tokens, objective="dpo", beta=0.1)
    assert float(loss) == pytest.approx(dpo, abs=1e-6) and float(m["nll/chosen"]) == pytest.approx(nll)
    loss, m = objective_loss(pc, pr, rc, rr, tokens, objective="rpo", beta=0.1, rpo_alpha=0.5)
    assert float(loss) == pytest.approx(dpo + 0.5 * nll, abs=1e-6) and float(m["dpo_loss"]) == pytest.approx(dpo, abs=1e-6)
    loss, m = objective_loss(pc, pr, rc, rr, tokens, objective="sft", beta=0.1)
    assert float(loss) == pytest.approx(nll)
    # likelihood displacement: chosen +1 and 0 -> +0.5; rejected -1 and +1 -> 0
    assert float(m["logps/chosen_delta"]) == pytest.approx(0.5) and float(m["logps/rejected_delta"]) == pytest.approx(0.0)
    w = jnp.array([1.0, 0.0])
    loss, _ = objective_loss(pc, pr, rc, rr, tokens, objective="sft", weights=w)
    assert float(loss) == pytest.approx(10.0 / 4)
    with pytest.raises(ValueError, match="objective"):
        objective_loss(pc, pr, rc, rr, tokens, objective="ipo")


def _first_update_nll(params, config, tokenizer, cfg):
    """Mean per-token NLL of the chosen completions of the first update, under the base model."""
    enc = batching.encode_pairs(PAIRS, tokenizer, cfg.dpo.max_length)
    ref_c, _ = train.reference_logps(train.make_ref_fn(config), params, enc.pairs, cfg.dpo, tokenizer.pad_id)
    first = epoch_order(len(PAIRS), cfg.dpo.seed, 0)[:4]
    return float(np.mean([-ref_c[i] / len(enc.pairs[i].chosen) for i in first])), ref_c


@pytest.mark.parametrize("objective", ["rpo", "sft"])
def test_rpo_and_sft_train_the_chosen_likelihood(objective, tiny_model, tokenizer, tmp):
    params, config = tiny_model
    cfg = tiny_cfg(epochs=3, objective=objective, rpo_alpha=0.5)
    result = train.train(cfg, PAIRS, params, config, tokenizer, tmp, progress=False, checkpoints=False)
    nll0, ref_c = _first_update_nll(params, config, tokenizer, cfg)
    h = result.history
    assert h[0]["dpo_loss"] == pytest.approx(math.log(2), abs=1e-4)  # fresh adapter == reference
    expected = nll0 if objective == "sft" else math.log(2) + 0.5 * nll0
    assert h[0]["loss"] == pytest.approx(expected, rel=1e-4)
    # every chosen completion became more likely: no likelihood displacement
    enc = batching.encode_pairs(PAIRS, tokenizer, cfg.dpo.max_length)
    merged = lora.merge(params, result.adapter, cfg.lora.scale)
    pol_c, _ = train.reference_logps(train.make_ref_fn(config), merged, enc.pairs, cfg.dpo, tokenizer.pad_id)
    assert np.all(pol_c > ref_c), pol_c - ref_c
    assert h[-1]["logps/chosen_delta"] > 0 and h[-1]["nll/chosen"] < h[0]["nll/chosen"]
    assert result.summary["objective"] == objective and result.summary["by_epoch"][3]["nll/chosen"] < h[0]["nll/chosen"]


def test_best_epoch_and_stopping_rule():
    rows = [{"epoch": 0, "heldout/accuracy": 0.9}, {"epoch": 1, "heldout/accuracy": 0.5},
            {"epoch": 2, "heldout/accuracy": 0.7}, {"epoch": 3, "heldout/accuracy": 0.7}]
    assert validation.best_epoch(rows) == 2  # the base (epoch 0) is never chosen; ties go to fewer epochs
    assert validation.should_stop(rows, patience=1) and not validation.should_stop(rows, patience=2)
    assert validation.best_epoch(rows[:1]) is None and not validation.should_stop(rows[:1], 1)


SCRIPT = {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.65, 4: 0.6, 5: 0.9, 6: 0.9}


def test_early_stopping_exports_the_best_epoch_and_a_rerun_stays_stopped(tiny_model, tokenizer, tmp):
    """Held-out accuracy (scripted by epoch) peaks at epoch 2; with patience 2 training stops after
    epoch 4 and exports epoch 2's adapter; every epoch logged its held-out pair metrics."""
    params, config = tiny_model
    cfg = apply_overrides(tiny_cfg(epochs=6), ["dpo.early_stopping=true", "dpo.patience=2", "pairs.heldout_fraction=0.2"])
    seen = []

    def epoch_eval(merged, epoch):
        seen.append(epoch)
        if epoch == 0:  # the base model: the adapter starts at zero
            for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(merged)):
                np.testing.assert_array_equal(a, b)
        return {"heldout/accuracy": SCRIPT[epoch], "heldout/format_rate": 1.0}

    result = train.train(cfg, PAIRS, params, config, tokenizer, tmp, progress=False, heldout_pairs=HELDOUT,
                         epoch_eval=epoch_eval)
    assert seen == [0, 1, 2, 3, 4]
    s = result.summary
    assert (s["epochs_run"], s["best_epoch"], s["exported_epoch"], s["stopped_early"]) == (4, 2, 2, True)
    assert len(result.history) == 4 * 2
    assert [r["epoch"] for r in result.epochs] == [0, 1, 2, 3, 4]
    base_row = result.epochs[0]
    assert base_row["heldout_pairs/n"] == 2 and base_row["heldout_pairs/dpo_loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert base_row["heldout_pairs/chosen_delta"] == pytest.approx(0.0, abs=1e-4)
    assert all("train/loss" in r and "heldout_pairs/accuracy" in r for r in result.epochs[1:])
    assert result.epochs[4]["heldout_pairs/margin"] > 0  # the held-out pairs are learned too (same pattern)

    ckpt = Checkpointer(tmp / "train" / "checkpoints")
    assert ckpt.all_steps() == [1, 2, 3, 4]
    kept = {n: ckpt.restore(n, items=["adapter"])[0]["adapter"] for n in (2, 4)}
    ckpt.close()
    exported, _ = peft_export.load(tmp / "adapter")
    for group, modules in exported.items():
        for module, ab in modules.items():
            np.testing.assert_allclose(ab["lora_B"], kept[2][group][module]["lora_B"], rtol=1e-6)
            assert not np.allclose(ab["lora_B"], kept[4][group][module]["lora_B"])  # not the last epoch

    seen.clear()
    again = train.train(cfg, PAIRS, params, config, tokenizer, tmp, progress=False, heldout_pairs=HELDOUT,
                        epoch_eval=epoch_eval)
    assert seen == [] and again.history == [] and again.summary["exported_epoch"] == 2
    # the relaunch's summary still counts the first process's updates (read back from metrics.jsonl)
    for key in ("updates_run", "by_epoch", "update_seconds"):
        assert again.summary[key] == s[key], key
    assert s["updates_run"] == 8 and sorted(s["by_epoch"]) == [1, 2, 3, 4]
    assert s["base_beats_exported"] is False  # held-out 0.5 at the base, 0.7 at the exported epoch 2
    for a, b in zip(jax.tree_util.tree_leaves(result.adapter), jax.tree_util.tree_leaves(again.adapter)):
        np.testing.assert_array_equal(a, b)


def test_early_stopping_needs_heldout_questions(tiny_model, tokenizer, tmp):
    with pytest.raises(ConfigError, match="pairs.heldout_fraction"):
        apply_overrides(CoherenceConfig(), ["dpo.early_stopping=true"])
    params, config = tiny_model
    cfg = apply_overrides(tiny_cfg(epochs=1), ["dpo.early_stopping=true", "pairs.heldout_fraction=0.2"])
    with pytest.raises(ConfigError, match="held-out greedy evaluation"):
        train.train(cfg, PAIRS, params, config, tokenizer, tmp, progress=False)
    with pytest.raises(ConfigError, match="dpo.objective"):
        apply_overrides(CoherenceConfig(), ["dpo.objective=ipo"])
    with pytest.raises(ConfigError, match="collect.canonical_twins"):
        apply_overrides(CoherenceConfig(), ["pairs.source=canonical"])
    with pytest.raises(ConfigError, match="pairs.heldout_fraction"):
        apply_overrides(CoherenceConfig(), ["pairs.heldout_fraction=1.0"])
