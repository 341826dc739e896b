"""The exported adapter in PEFT's format: PEFT on the transformers model gives our logits."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.model import lora, peft_export
from jaxdebate.coherence.config import LoraConfig
from jaxdebate.errors import WeightsError
from jaxdebate.model import export_hf, logits

TOL = 1e-4  # max |Δlogit| in float32 (the base model alone agrees to ~1e-5)


def random_adapter(params, spec, seed=0):
    adapter = lora.init(params, spec, jax.random.PRNGKey(seed))
    keys = iter(jax.random.split(jax.random.PRNGKey(seed + 1), 16))
    for group in adapter.values():
        for ab in group.values():
            ab["lora_B"] = 0.05 * jax.random.normal(next(keys), ab["lora_B"].shape)
    return adapter


def test_peft_loads_our_adapter_with_the_same_logits(tiny_model, tmp):
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import LlamaForCausalLM

    params, config = tiny_model
    spec = LoraConfig(rank=4, alpha=16.0, targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    adapter = random_adapter(params, spec)
    export_hf(params, config, tmp / "base")
    peft_export.save(tmp / "adapter", adapter, spec, base_model=str(tmp / "base"))

    saved = json.loads((tmp / "adapter" / "adapter_config.json").read_text())
    assert saved["r"] == 4 and saved["lora_alpha"] == 16.0 and saved["peft_type"] == "LORA"

    hf = LlamaForCausalLM.from_pretrained(tmp / "base", torch_dtype=torch.float32).eval()
    model = peft.PeftModel.from_pretrained(hf, tmp / "adapter").eval()
    # PEFT found every one of our tensors under its own names and shapes
    state = model.state_dict()
    for name, value in peft_export.to_peft_tensors(adapter).items():
        peft_name = name.replace(".weight", ".default.weight")
        assert peft_name in state, peft_name
        np.testing.assert_array_equal(state[peft_name].numpy(), value)

    tokens = np.array([[1, 17, 400, 923, 5, 77, 3001, 42, 9, 12]], np.int32)
    with torch.no_grad():
        theirs = model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
    ours = np.asarray(logits(lora.merge(params, adapter, spec.scale), config, jnp.asarray(tokens)))
    base = np.asarray(logits(params, config, jnp.asarray(tokens)))
    assert np.abs(ours - base).max() > 100 * TOL  # the adapter really changes the model
    assert np.abs(ours - theirs).max() < TOL


def test_adapter_round_trip_and_bad_directories(tiny_model, tmp):
    params, _ = tiny_model
    spec = LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "down_proj"))
    adapter = random_adapter(params, spec, seed=3)
    peft_export.save(tmp / "a", adapter, spec)
    back, spec_back = peft_export.load(tmp / "a")
    assert (spec_back.rank, spec_back.alpha, set(spec_back.targets)) == (2, 4.0, {"q_proj", "down_proj"})
    for group, modules in adapter.items():
        for module, ab in modules.items():
            for k in ("lora_A", "lora_B"):
                np.testing.assert_array_equal(back[group][module][k], np.asarray(ab[k]))
    with pytest.raises(WeightsError, match="adapter_config.json is missing"):
        peft_export.load(tmp / "nowhere")
    cfg = json.loads((tmp / "a" / "adapter_config.json").read_text())
    (tmp / "a" / "adapter_config.json").write_text(json.dumps({**cfg, "use_dora": True}))
    with pytest.raises(WeightsError, match="use_dora"):
        peft_export.load(tmp / "a")
