"""DPO loss, LoRA on the real Flax Llama, and DPO training of an adapter on a tiny model."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.coherence import batching, train
from jaxdebate.model import lora
from jaxdebate.coherence.config import CoherenceConfig, DPOConfig, LoraConfig
from jaxdebate.coherence.dpo import dpo_loss
from jaxdebate.configlib import apply_overrides
from jaxdebate.errors import ConfigError
from jaxdebate.model import logits

from dpo_fixtures import PAIRS, tiny_cfg


def test_dpo_loss_equals_hand_computed_value():
    # pair 1: margin = 0.1*((-10)-(-11)) - 0.1*((-12)-(-11)) = 0.2 -> loss = log(1 + e^-0.2) = 0.5981388693
    # pair 2: margin = 0.1*((-5)-(-5)) - 0.1*((-4)-(-5)) = -0.1 -> loss = log(1 + e^0.1) = 0.7443966600
    loss, m = dpo_loss(
        jnp.array([-10.0, -5.0]), jnp.array([-12.0, -4.0]), jnp.array([-11.0, -5.0]), jnp.array([-11.0, -5.0]), 0.1
    )
    assert float(loss) == pytest.approx((0.5981388693 + 0.7443966600) / 2, abs=1e-6)
    assert float(m["rewards/margin"]) == pytest.approx((0.2 - 0.1) / 2, abs=1e-6)
    assert float(m["rewards/chosen"]) == pytest.approx((0.1 + 0.0) / 2, abs=1e-6)
    assert float(m["rewards/rejected"]) == pytest.approx((-0.1 + 0.1) / 2, abs=1e-6)
    assert float(m["rewards/accuracy"]) == 0.5
    # zero-weight (padding) pairs do not count
    loss_w, m_w = dpo_loss(
        jnp.array([-10.0, 99.0]), jnp.array([-12.0, 0.0]), jnp.array([-11.0, 0.0]), jnp.array([-11.0, 0.0]), 0.1,
        weights=jnp.array([1.0, 0.0]),
    )
    assert float(loss_w) == pytest.approx(0.5981388693, abs=1e-6)
    assert float(m_w["rewards/accuracy"]) == 1.0
    # policy == reference: loss is log 2 whatever beta
    z = jnp.array([-3.0])
    assert float(dpo_loss(z, z - 1, z, z - 1, 0.5)[0]) == pytest.approx(math.log(2), abs=1e-6)


def test_sequence_logprobs_sum_only_completion_tokens(tiny_model, tokenizer):
    params, config = tiny_model
    pairs = [{"question": "What is 2+2?", "chosen": "It is 4.\nAnswer: 4", "rejected": "Answer: 5",
              "rejected_finish_reason": "length"}]
    enc = batching.encode_pairs(pairs, tokenizer, 512)
    p = enc.pairs[0]
    assert p.chosen[-1] == tokenizer.eos_id and p.rejected[-1] != tokenizer.eos_id  # EOS only if it stopped
    arr = batching.make_update(enc.pairs, [0], batch_size=1, grad_accumulation=1, length_bucket=32,
                               max_length=512, pad_id=tokenizer.pad_id)
    assert arr["tokens"].shape[-1] % 32 == 0
    seq = train.policy_logps(params, config, arr["tokens"][0], arr["mask"][0], arr["completion_mask"][0])
    # by hand: full logits, log-softmax, pick each completion token given its prefix
    for row, completion in ((0, p.chosen), (1, p.rejected)):
        ids = np.array(p.prompt + completion)[None]
        lp = jax.nn.log_softmax(logits(params, config, ids)[0], axis=-1)
        start = len(p.prompt)
        expected = sum(float(lp[t - 1, ids[0, t]]) for t in range(start, ids.shape[1]))
        assert float(seq[row]) == pytest.approx(expected, rel=1e-4, abs=1e-3)


def test_encode_pairs_truncates_and_drops(tokenizer):
    long = " ".join(["word"] * 400)
    pairs = [{"question": "Q?", "chosen": long, "rejected": "short"}, {"question": "x " * 600, "chosen": "a", "rejected": "b"}]
    enc = batching.encode_pairs(pairs, tokenizer, 128)
    assert enc.n_dropped == 1 and enc.n_truncated == 1 and enc.source_index == (0,)
    p = enc.pairs[0]
    assert len(p.prompt) + len(p.chosen) == 128


def test_lora_merge_is_identity_at_init_and_adds_scaled_product(tiny_model):
    params, config = tiny_model
    spec = LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj"))
    adapter = lora.init(params, spec, jax.random.PRNGKey(0))
    assert set(adapter) == {"self_attn", "mlp"} and set(adapter["self_attn"]) == {"q_proj", "v_proj"}
    L, d_in, d_out = params["layers"]["mlp"]["down_proj"]["kernel"].shape
    assert adapter["mlp"]["down_proj"]["lora_A"].shape == (L, d_in, 4)
    assert adapter["mlp"]["down_proj"]["lora_B"].shape == (L, 4, d_out)
    merged = lora.merge(params, adapter, spec.scale)
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(merged)):
        np.testing.assert_array_equal(a, b)  # B = 0: the model is unchanged
    adapter["self_attn"]["q_proj"]["lora_B"] = jnp.ones_like(adapter["self_attn"]["q_proj"]["lora_B"])
    merged = lora.merge(params, adapter, spec.scale)
    a = adapter["self_attn"]["q_proj"]["lora_A"]
    expected = params["layers"]["self_attn"]["q_proj"]["kernel"] + 2.0 * a @ jnp.ones((L, 4, a.shape[1] and params["layers"]["self_attn"]["q_proj"]["kernel"].shape[2]))
    np.testing.assert_allclose(merged["layers"]["self_attn"]["q_proj"]["kernel"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(merged["layers"]["self_attn"]["k_proj"]["kernel"], params["layers"]["self_attn"]["k_proj"]["kernel"])
    assert lora.n_params(adapter) == sum(x.size for x in jax.tree_util.tree_leaves(adapter))


def test_lora_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="lora.targets"):
        LoraConfig(targets=("qkv",))
    with pytest.raises(ConfigError, match="lora.rank"):
        LoraConfig(rank=0)
    with pytest.raises(ConfigError, match="dpo.beta"):
        DPOConfig(beta=0.0)
    with pytest.raises(ConfigError, match="dpo.schedule"):
        apply_overrides(CoherenceConfig(), ["dpo.schedule=step"])




def margins(adapter, params, config, tokenizer, cfg):
    enc = batching.encode_pairs(PAIRS, tokenizer, cfg.dpo.max_length)
    ref_fn = train.make_ref_fn(config)
    rc, rr = train.reference_logps(ref_fn, params, enc.pairs, cfg.dpo, tokenizer.pad_id)
    merged = lora.merge(params, adapter, cfg.lora.scale)
    pc, pr = train.reference_logps(ref_fn, merged, enc.pairs, cfg.dpo, tokenizer.pad_id)
    return cfg.dpo.beta * ((pc - rc) - (pr - rr))


def test_dpo_training_raises_the_margin_and_checkpoints_every_epoch(tiny_model, tokenizer, tmp):
    params, config = tiny_model
    cfg = tiny_cfg()
    before = np.asarray(jax.tree_util.tree_leaves(params)[0]).copy()
    result = train.train(cfg, PAIRS, params, config, tokenizer, tmp, progress=False)
    np.testing.assert_array_equal(jax.tree_util.tree_leaves(params)[0], before)  # base frozen
    h = result.history
    assert len(h) == 3 * 2  # 5 pairs, 4 per update -> 2 updates per epoch
    assert all(x["grad_norm"] > 0 for x in h)
    assert h[0]["loss"] == pytest.approx(math.log(2), abs=1e-4)  # fresh adapter == reference
    m = margins(result.adapter, params, config, tokenizer, cfg)
    assert np.all(m > 0), m  # every chosen completion gained on its rejected one
    assert h[-1]["loss"] < h[0]["loss"] - 0.05
    assert h[-1]["rewards/margin"] > 0
    # one orbax checkpoint per epoch, metrics JSONL, PEFT files
    steps = sorted(int(p.name) for p in (tmp / "train" / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [1, 2, 3]
    lines = [json.loads(x) for x in (tmp / "train" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == list(range(1, 7))
    assert {"loss", "grad_norm", "rewards/margin", "rewards/accuracy", "lr"} <= set(lines[0])
    assert (tmp / "adapter" / "adapter_config.json").is_file()
    assert (tmp / "adapter" / "adapter_model.safetensors").is_file()
    summary = json.loads((tmp / "train" / "summary.json").read_text())
    assert summary["pairs_trained"] == 5 and summary["updates_run"] == 6


def test_dpo_never_applies_a_nonfinite_update(tiny_model, tokenizer, tmp):
    """The GRPO learner's guard (rl.optim.guarded_apply): an update that could overflow, or that follows
    a non-finite loss, is skipped, so the adapter stays finite and the run says how many it skipped."""
    params, config = tiny_model
    result = train.train(tiny_cfg(epochs=1, learning_rate=1e36, schedule="constant"), PAIRS, params, config,
                         tokenizer, tmp / "a", progress=False, checkpoints=False)
    assert all(bool(np.all(np.isfinite(np.asarray(x)))) for x in jax.tree_util.tree_leaves(result.adapter))
    # lr 1e36 passes the bound once and makes the weights huge: every later loss is non-finite
    skipped = [h for h in result.history if h["nonfinite/params"] or h["nonfinite/loss"] or h["nonfinite/grad_norm"]]
    assert skipped and len(skipped) < len(result.history), result.history
    assert all(h["nonfinite/loss"] for h in skipped)
    assert result.summary["updates_skipped_nonfinite"] == len(skipped)
    # lr 1e38 could overflow the first update already (the bound refuses it): the adapter never moves
    refused = train.train(tiny_cfg(epochs=1, learning_rate=1e38, schedule="constant"), PAIRS, params, config,
                          tokenizer, tmp / "b", progress=False, checkpoints=False)
    assert all(h["nonfinite/params"] for h in refused.history)
    assert refused.summary["updates_skipped_nonfinite"] == len(refused.history)


def test_dpo_resume_continues_exactly(tiny_model, tokenizer, tmp):
    params, config = tiny_model
    straight = train.train(tiny_cfg(epochs=2), PAIRS, params, config, tokenizer, tmp / "a", progress=False)
    first = train.train(tiny_cfg(epochs=1), PAIRS, params, config, tokenizer, tmp / "b", progress=False)
    resumed = train.train(tiny_cfg(epochs=2), PAIRS, params, config, tokenizer, tmp / "b", progress=False)
    assert len(first.history) == 2 and len(resumed.history) == 2  # only epoch 2 ran after the resume
    for a, b in zip(jax.tree_util.tree_leaves(straight.adapter), jax.tree_util.tree_leaves(resumed.adapter)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    lines = (tmp / "b" / "train" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4]
    with pytest.raises(ConfigError, match="other pairs"):
        train.train(tiny_cfg(epochs=3), PAIRS[:4], params, config, tokenizer, tmp / "b", progress=False)


def test_schedules():
    total = 10
    # the last update (9 of 10) of a decay to 0: linear 1/10 of the peak, cosine (1 + cos(0.9 pi)) / 2
    for name, at_end in (("constant", 1.0), ("linear", 0.1), ("cosine", 0.5 * (1 + math.cos(0.9 * math.pi)))):
        s = train.make_schedule(dataclasses.replace(DPOConfig(), schedule=name, learning_rate=1.0), total)
        assert float(s(0)) == pytest.approx(1.0)
        assert float(s(9)) == pytest.approx(at_end, abs=1e-6)
    warm = train.make_schedule(DPOConfig(learning_rate=1.0, warmup_ratio=0.2, schedule="constant"), total)
    # 2 warm-up updates: 1/3, 2/3 of the peak (the first update already moves the weights), then the peak
    assert float(warm(0)) == pytest.approx(1 / 3) and float(warm(1)) == pytest.approx(2 / 3) and float(warm(5)) == 1.0


def test_the_run_fingerprint_ignores_the_epoch_count_and_sees_what_changes_the_adapter():
    """A resumed run refuses another run's checkpoints: the objective and the model section change the
    fingerprint; raising the epoch count does not, and neither did adding model.dot_dtype."""
    base = train.run_fingerprint(tiny_cfg(), PAIRS)
    # what the code before model.dot_dtype computed for this config (e238432), so its runs still resume
    assert base == "36623e0dbea53f22"
    assert train.run_fingerprint(tiny_cfg(epochs=5), PAIRS) == base
    assert train.run_fingerprint(tiny_cfg(objective="rpo"), PAIRS) != base
    cfg = tiny_cfg()
    assert train.run_fingerprint(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, remat="full")),
                                 PAIRS) != base
