"""Loading (HF dirs, sharded, GGUF, tiny) and exporting weights; every bad input is one clear error."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from jaxdebate.errors import WeightsError
from jaxdebate.model import export_hf, load, logits
from jaxdebate.model.sources import bundled_gguf_path

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _save_torch_llama(directory, *, tie=False, **kw):
    """A random transformers Llama (GQA, untied, llama3 rope) saved in 4 safetensors shards."""
    hf_config = transformers.LlamaConfig(
        vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=tie,
        max_position_embeddings=128, initializer_range=0.1, rope_theta=5e5,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64}, **kw,
    )
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(hf_config)
    model.save_pretrained(directory, max_shard_size="40KB")
    return model


def _read_weights(directory):
    tensors = {}
    for path in sorted(directory.glob("*.safetensors")):
        tensors.update(load_file(str(path)))
    return tensors


def test_hf_to_ours_to_hf_is_lossless(tmp):
    model = _save_torch_llama(tmp / "src")
    assert (tmp / "src" / "model.safetensors.index.json").is_file()  # really sharded
    params, config = load(str(tmp / "src"))
    out = export_hf(params, config, tmp / "out")
    original = {k: v.numpy() for k, v in model.state_dict().items()}
    exported = _read_weights(out)
    assert sorted(exported) == sorted(original)
    for name, value in original.items():
        assert exported[name].dtype == np.float32
        np.testing.assert_array_equal(exported[name], value, err_msg=name)
    src_config = transformers.AutoConfig.from_pretrained(tmp / "src").to_dict()
    out_config = transformers.AutoConfig.from_pretrained(out).to_dict()
    for key in ("hidden_size", "num_key_value_heads", "rope_parameters", "rms_norm_eps", "tie_word_embeddings",
                "vocab_size", "num_hidden_layers", "head_dim", "intermediate_size", "bos_token_id"):
        assert out_config[key] == src_config[key], key


@pytest.mark.parametrize("source", ["tiny", "tiny:tie=false,layers=1,seed=3"])
def test_export_loads_in_transformers_with_same_logits(tmp, tokenizer, source):
    params, config = load(source)
    out = export_hf(params, config, tmp / "hf", tokenizer=tokenizer)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(model).__name__ == "LlamaForCausalLM"
    ids = tokenizer.encode_chat([{"role": "user", "content": "What is 2+3?"}])
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits.numpy()
    ours = np.asarray(logits(params, config, np.asarray([ids])))
    assert np.abs(ours - ref).max() < 1e-4
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == tokenizer.chat_text(
        [{"role": "user", "content": "hi"}], add_generation_prompt=False)
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == config.eos_token_id


def test_bfloat16_export_and_reexport_replaces_weights(tmp, tiny_model):
    params, config = tiny_model
    out = export_hf(params, config, tmp / "hf", dtype="bfloat16")
    (out / "model-00002-of-00002.safetensors").write_bytes(b"stale")
    export_hf(params, config, out, dtype="bfloat16")
    assert sorted(p.name for p in out.glob("*.safetensors")) == ["model.safetensors"]
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    embedding = model.model.embed_tokens.weight.detach().float().numpy()
    expected = np.asarray(params["embed_tokens"]["embedding"].astype("bfloat16").astype("float32"))
    np.testing.assert_array_equal(embedding, expected)
    reloaded, _ = load(str(out))
    q = np.asarray(reloaded["layers"]["self_attn"]["q_proj"]["kernel"])
    np.testing.assert_allclose(q, np.asarray(params["layers"]["self_attn"]["q_proj"]["kernel"]), atol=1e-3)


# ------------------------------------------------------------------------------------------ bad input


@pytest.fixture
def hf_dir(tmp):
    _save_torch_llama(tmp / "m")
    return tmp / "m"


def _edit_config(directory, **changes):
    path = directory / "config.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_missing_config_or_weights(tmp, hf_dir):
    (tmp / "empty").mkdir()
    with pytest.raises(WeightsError, match="config.json"):
        load(str(tmp / "empty"))
    shutil.copy(hf_dir / "config.json", tmp / "empty" / "config.json")
    with pytest.raises(WeightsError, match=r"no \*\.safetensors"):
        load(str(tmp / "empty"))
    shard = sorted(hf_dir.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(WeightsError, match=shard.name):
        load(str(hf_dir))


@pytest.mark.parametrize(
    "changes,pattern",
    [
        ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "model_type='gpt2'.*not a Llama"),
        ({"architectures": ["MistralForCausalLM"]}, "MistralForCausalLM"),
        ({"attention_bias": True}, "attention_bias"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "rope type 'yarn'"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"num_attention_heads": 3}, "num_heads"),
    ],
)
def test_unsupported_config_is_named(hf_dir, changes, pattern):
    _edit_config(hf_dir, **changes)
    with pytest.raises(WeightsError, match=pattern) as info:
        load(str(hf_dir))
    assert "config.json" in str(info.value)


def test_corrupt_weight_file_is_named(hf_dir):
    shard = sorted(hf_dir.glob("model-*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(WeightsError, match=f"corrupt.*{shard.name}"):
        load(str(hf_dir))


def test_shape_mismatch_names_tensor_and_file(hf_dir):
    _edit_config(hf_dir, intermediate_size=64)
    with pytest.raises(WeightsError, match=r"mlp.gate_proj.weight' in .*safetensors has shape \(48, 32\)"):
        load(str(hf_dir))


def test_missing_and_unexpected_tensors_are_named(hf_dir):
    path = sorted(hf_dir.glob("model-*.safetensors"))[0]
    tensors = load_file(str(path))
    victim = sorted(tensors)[0]
    rest = {k: v for k, v in tensors.items() if k != victim}
    save_file(rest, str(path), metadata={"format": "pt"})
    index = json.loads((hf_dir / "model.safetensors.index.json").read_text())
    del index["weight_map"][victim]
    (hf_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match=f"missing tensor '{victim}'"):
        load(str(hf_dir))
    save_file({**tensors, "model.layers.0.self_attn.q_proj.bias": np.zeros(32, np.float32)}, str(path),
              metadata={"format": "pt"})
    index["weight_map"]["model.layers.0.self_attn.q_proj.bias"] = path.name
    (hf_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match="unexpected tensor 'model.layers.0.self_attn.q_proj.bias'"):
        load(str(hf_dir))


def test_bad_sources_and_tiny_options(tmp):
    with pytest.raises(WeightsError, match="unknown tiny option"):
        load("tiny:layerz=2")
    with pytest.raises(WeightsError, match="tiny option layers='two'"):
        load("tiny:layers=two")
    with pytest.raises(WeightsError, match="num_heads"):
        load("tiny:heads=3,kv_heads=2")
    with pytest.raises(WeightsError, match="GGUF file not found"):
        load(f"gguf:{tmp}/nothing.gguf")
    with pytest.raises(WeightsError, match="neither an existing directory"):
        load("./no/such/dir")
    params, config = load("tiny:layers=1,hidden=32,heads=2,kv_heads=1,vocab=1000,tie=false,seed=7")
    assert config.num_layers == 1 and config.head_dim == 16 and not config.tie_word_embeddings
    assert params["lm_head"]["kernel"].shape == (32, 1000)


def test_bad_gguf_files_are_named(tmp):
    truncated = tmp / "broken.gguf"
    with open(bundled_gguf_path(), "rb") as f:
        truncated.write_bytes(f.read(1 << 16))
    with pytest.raises(WeightsError, match="broken.gguf"):
        load(f"gguf:{truncated}")
    import gguf

    writer = gguf.GGUFWriter(str(tmp / "gpt2.gguf"), "gpt2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(WeightsError, match="gpt2.gguf.*architecture='gpt2' is not a Llama"):
        load(f"gguf:{tmp / 'gpt2.gguf'}")


# ------------------------------------------------------------------------------------------ SmolLM2


@pytest.mark.smollm2
@pytest.mark.slow
def test_bundled_gguf_matches_transformers_gguf_loading(smollm2, tokenizer):
    """Same dequantised weights as transformers' GGUF loader (incl. the Q/K un-permutation), and logits
    within 1e-3 (measured: max |Δ| ≈ 1e-4 on logits of magnitude ~40)."""
    params, config = smollm2
    assert config.num_params == 134_515_008 and config.num_heads == 9 and config.num_kv_heads == 3
    path = bundled_gguf_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    state = model.state_dict()
    for layer in (0, 29):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            ours = np.asarray(params["layers"]["self_attn"][proj]["kernel"][layer]).T
            theirs = state[f"model.layers.{layer}.self_attn.{proj}.weight"].numpy()
            np.testing.assert_array_equal(ours, theirs, err_msg=f"layer {layer} {proj}")
    ids = np.asarray([tokenizer.encode_chat([{"role": "user", "content": "Name three prime numbers."}])])
    with torch.no_grad():
        ref = model(torch.tensor(ids)).logits.numpy()
    ours = np.asarray(logits(params, config, ids))
    assert np.abs(ref).max() > 10
    assert np.abs(ours - ref).max() < 1e-3
    assert (ours.argmax(-1) == ref.argmax(-1)).all()
    jax.clear_caches()
