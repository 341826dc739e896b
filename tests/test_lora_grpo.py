"""LoRA-GRPO (issue 13 item 2): the GRPO learner trains a LoRA adapter on a frozen base. It starts
exactly at the base, learns a scripted task, keeps optimiser state for the adapter only, and a real
training run checkpoints, resumes and exports its adapter in the PEFT format."""

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.config import LossConfig, OptimizerConfig, PolicyLoraConfig
from jaxdebate.model import load, load_tokenizer
from jaxdebate.rl.batching import Sample, make_microbatches
from jaxdebate.rl.grpo import Learner
from jaxdebate.sampling import JaxSampler, SamplingParams
from jaxdebate.shaping import compute_advantages

ROOT = Path(__file__).resolve().parents[1]
TINY = "tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=64,seed=3"
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SPEC = PolicyLoraConfig(rank=4, alpha=8.0, targets=ALL)


def _reward(tokens) -> float:
    return float(np.mean(np.asarray(tokens) < 8))


def _batch(sampler, prompts, step, n=8, new=8):
    out = sampler.generate(prompts, SamplingParams(temperature=1.0, max_tokens=new, n=n, seed=step))
    rewards = np.array([[_reward(c.token_ids) for c in row] for row in out], np.float32)
    shaped = rewards[:, :, None, None]
    adv = np.asarray(compute_advantages(shaped, np.ones(shaped.shape, bool), estimator="grpo", grouping="prompt"))
    samples = [Sample(np.array(prompts[b]), np.array(c.token_ids), np.array(c.logprobs), adv[b, g, 0, 0])
               for b, row in enumerate(out) for g, c in enumerate(row)]
    mbs, _ = make_microbatches(samples, max_len=32, rows_cap=32, max_tokens=1024, aggregation="token",
                               max_completion=new)
    return rewards, mbs


def test_lora_learner_starts_at_the_base_and_trains_the_adapter_only():
    params, config = load(TINY)
    tokenizer = load_tokenizer("tiny")
    loss, opt = LossConfig(beta=0.04), OptimizerConfig(peak_lr=3e-2, end_lr=3e-2, schedule="constant")
    full = Learner(config, loss, opt, 10)
    lora = Learner(config, loss, opt, 10, lora=SPEC, seed=1)
    full_state = full.init_state(jax.tree.map(jnp.copy, params))
    state = lora.init_state(params)
    base_before = jax.tree.map(np.array, params)
    merged = lora.weights(state.params)
    for a, b in zip(jax.tree.leaves(merged), jax.tree.leaves(params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # B = 0: exactly the base

    adapter_size = sum(x.size for x in jax.tree.leaves(state.params))
    assert set(state.params["self_attn"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert adapter_size < 0.5 * sum(x.size for x in jax.tree.leaves(params))
    assert sum(x.size for x in jax.tree.leaves(state.opt_state)) <= 2 * adapter_size + 4  # Adam moments + count
    assert jax.tree.structure(state.ref_params) == jax.tree.structure(state.params)  # reference = an adapter

    sampler = JaxSampler(jax.tree.map(jnp.copy, params), config, tokenizer, max_total_len=32, stop_ids=())
    prompts = [np.random.default_rng(0).integers(8, 64, 8).tolist() for _ in range(4)]
    _, mbs = _batch(sampler, prompts, 0)
    _, m_full = full.update(full_state, mbs)
    state, m_lora = lora.update(state, mbs)
    assert m_lora["loss"] == pytest.approx(m_full["loss"], rel=1e-5, abs=1e-6)  # same start, same loss
    assert m_lora["grad_norm"] > 0
    for a, b in zip(jax.tree.leaves(lora.base), jax.tree.leaves(base_before)):
        np.testing.assert_array_equal(np.asarray(a), b)  # the base never moves
    assert any(np.abs(np.asarray(ab["lora_B"])).max() > 0 for g in state.params.values() for ab in g.values())
    state = lora.hard_update_reference(state)
    for a, b in zip(jax.tree.leaves(state.ref_params), jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_lora_grpo_learns_the_scripted_task():
    """Reward = share of completion tokens with id < 8. The tiny model's tied embeddings are scaled
    up 10x: at their random init (std 0.012) no hidden state moves a logit by more than ~1, so only
    training the embeddings (which LoRA leaves frozen) could learn the task."""
    params, config = load(TINY)
    params = {**params, "embed_tokens": {"embedding": params["embed_tokens"]["embedding"] * 10}}
    tokenizer = load_tokenizer("tiny")
    steps = 20
    learner = Learner(config, LossConfig(beta=0.0), OptimizerConfig(peak_lr=2e-2, end_lr=2e-2, schedule="constant"),
                      steps, lora=SPEC)
    state = learner.init_state(params)
    sampler = JaxSampler(learner.weights(state.params), config, tokenizer, max_total_len=32, stop_ids=())
    rng = np.random.default_rng(0)
    prompts = [rng.integers(8, 64, 8).tolist() for _ in range(4)]
    history = []
    for step in range(steps):
        rewards, mbs = _batch(sampler, prompts, step)
        history.append(rewards.mean())
        state, metrics = learner.update(state, mbs)
        assert metrics["logprob_abs_mismatch"] < 1e-4  # the sampler serves base + adapter exactly
        sampler.update_weights(learner.weights(state.params), step + 1)
    start, end = np.mean(history[:5]), np.mean(history[-5:])
    print(f"LoRA-GRPO: mean reward {start:.3f} -> {end:.3f}")
    assert start < 0.15 and end > 0.8, np.round(history, 2)


@pytest.mark.slow
def test_lora_run_checkpoints_resumes_and_exports_a_peft_adapter(tmp_path):
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import LlamaForCausalLM

    from jaxdebate.checkpoint import export_adapter, export_checkpoint, restore, restore_trainable
    from jaxdebate.model import logits

    overrides = ["training.total_train_steps=2", "training.train_batch_size=1", "sampler.max_new_tokens=8",
                 "training.validation_every_steps=0", "training.checkpoint_every_steps=1",
                 "logging.progress_bar=false", "logging.tensorboard=false", "optimizer.warmup_steps=0",
                 "optimizer.peak_lr=1e-2", "model.lora.rank=4", "model.lora.alpha=8.0",
                 "model.lora.targets=['q_proj','v_proj','down_proj']"]

    def launch(workdir, *extra):
        cmd = [sys.executable, "-m", "jaxdebate.launch", "--config", "configs/smoke.py", "--workdir", str(workdir),
               "--set", *overrides, *extra]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]

    straight, split = tmp_path / "straight", tmp_path / "split"
    launch(straight)
    launch(split, "training.total_train_steps=1")
    launch(split)  # resumes from step 1
    a1, config = restore_trainable(straight)
    a2, _ = restore_trainable(split)
    assert set(a1) == {"self_attn", "mlp"} and set(a1["self_attn"]) == {"q_proj", "v_proj"}
    for x, y in zip(jax.tree.leaves(a1), jax.tree.leaves(a2)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

    merged, _ = restore(straight)
    base, llama = load(config.model.source)
    tokens = np.array([[1, 17, 400, 923, 5, 77, 3001, 42]], np.int32)
    ours = np.asarray(logits(merged, llama, jnp.asarray(tokens)))
    assert np.abs(ours - np.asarray(logits(base, llama, jnp.asarray(tokens)))).max() > 1e-4  # it trained

    export_checkpoint(straight, tmp_path / "merged-hf")  # the merged policy as an HF directory
    from jaxdebate.model import export_hf

    export_hf(base, llama, tmp_path / "base-hf")
    export_adapter(straight, tmp_path / "adapter")
    hf = LlamaForCausalLM.from_pretrained(tmp_path / "base-hf", torch_dtype=torch.float32).eval()
    model = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    merged_hf = LlamaForCausalLM.from_pretrained(tmp_path / "merged-hf", torch_dtype=torch.float32).eval()
    with torch.no_grad():
        via_peft = model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
        via_merged = merged_hf(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
    assert np.abs(via_peft - ours).max() < 1e-4 and np.abs(via_merged - ours).max() < 1e-4
