"""The weight-sync file (issue 12 item 3) and the sync settings of a server on another host (issue 16
item 4), without a server: the file holds exactly the HF export's tensors (matrices ``[in, out]``),
is rewritten in place, and ``sampler.vllm.sync`` picks path or push as documented."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from jaxdebate.errors import ConfigError
from jaxdebate.model import hf_state_dict, load
from jaxdebate.sampling.vllm import weight_file as weight_sync
from jaxdebate.sampling.vllm.in_server import worker_ext as vllm_worker_ext
from jaxdebate.sampling.vllm.config import VLLMConfig
from jaxdebate.sampling.vllm.weight_file import SyncFile, SyncWriter


def _bytes(a):
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("source", ["tiny", "tiny:tie=false", "tiny:layers=1"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sync_file_holds_the_hf_export_with_matrices_in_jax_layout(source, dtype, tmp_path):
    params, config = load(source)
    path = SyncWriter(tmp_path / "w.safetensors").write(SyncFile(params, config, dtype))
    got, want = load_file(str(path)), hf_state_dict(params, config, dtype)
    assert sorted(got) == sorted(want)
    for name, expected in want.items():
        array = got[name]
        if name.endswith("_proj.weight") or name == "lm_head.weight":
            array = array.T  # stored [in, out]
        assert array.shape == expected.shape and np.array_equal(_bytes(array), _bytes(expected)), name
    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata()[weight_sync.LAYOUT_KEY] == weight_sync.LAYOUT_IN_OUT


def test_writer_overwrites_one_file_in_place_and_matches_the_push_body(tmp_path):
    params, config = load("tiny")
    writer = SyncWriter(tmp_path / "w.safetensors")
    first = writer.write(SyncFile(params, config, "float32"))
    inode = first.stat().st_ino
    doubled = {**params, "norm": {"scale": params["norm"]["scale"] * 2}}
    sync = SyncFile(doubled, config, "float32")
    assert writer.write(sync).stat().st_ino == inode
    assert np.array_equal(load_file(str(first))["model.norm.weight"], np.asarray(doubled["norm"]["scale"]))
    assert bytes(sync.to_bytes()) == first.read_bytes()
    smaller = SyncFile(params, config, "bfloat16")  # another size: remapped, still valid
    writer.write(smaller)
    assert first.stat().st_size == smaller.size and bytes(smaller.to_bytes()) == first.read_bytes()
    writer.close()


def test_bad_dtype_is_a_clear_error():
    params, config = load("tiny")
    with pytest.raises(ConfigError, match="weight sync dtype"):
        SyncFile(params, config, "int8")


def test_the_worker_extension_reads_the_layout_the_file_declares():
    assert vllm_worker_ext.LAYOUT_KEY == weight_sync.LAYOUT_KEY
    assert vllm_worker_ext.LAYOUT_IN_OUT == weight_sync.LAYOUT_IN_OUT


def test_merged_rows_of_transposed_parts_equal_the_hf_concatenation():
    import torch

    q, k = torch.randn(8, 6), torch.randn(8, 2)  # [in, out] storage
    merged = vllm_worker_ext._stack_rows([q.t(), k.t()])
    assert torch.equal(merged, torch.cat([q.t(), k.t()], dim=0)) and merged.t().is_contiguous()
    dense = [torch.randn(6, 8), torch.randn(2, 8)]  # HF [out, in]
    assert torch.equal(vllm_worker_ext._stack_rows(dense), torch.cat(dense, dim=0))
    # the layout vLLM's AMX packer reads: the same matrix, [out, in] storage, for merged and single parts
    for parts in ([q.t(), k.t()], [q.t()]):
        rows = vllm_worker_ext._stack_rows(parts, row_major=True)
        assert torch.equal(rows, torch.cat(parts, dim=0)) and rows.is_contiguous()


# -- sampler.vllm.sync and sync_dir for a server on another host


@pytest.mark.parametrize(("fields", "mode"), [
    ({}, "path"),
    ({"url": "http://127.0.0.1:8000"}, "path"),
    ({"url": "http://localhost:8000"}, "path"),
    ({"url": f"http://{socket.gethostname()}:8000"}, "path"),
    ({"url": "http://sampler-node-7.cluster:8000"}, "push"),
    ({"url": "http://10.1.2.3:8000", "sync_dir": "/shared/sync"}, "path"),
    ({"url": "http://127.0.0.1:8000", "sync": "push"}, "push"),
    ({"url": "http://10.1.2.3:8000", "sync": "path"}, "path"),
])
def test_remote_sync_mode_auto_pushes_to_another_host_without_a_shared_dir(fields, mode):
    assert VLLMConfig(**fields).sync_mode() == mode


def test_remote_sync_settings_are_validated():
    with pytest.raises(ConfigError, match=r"sampler\.vllm\.sync .*needs sampler\.vllm\.url"):
        VLLMConfig(sync="push")
    with pytest.raises(ConfigError, match=r"sampler\.vllm\.sync must be one of"):
        VLLMConfig(sync="rsync")
    with pytest.raises(ConfigError, match=r"sampler\.vllm\.sync_dir must be an absolute path"):
        VLLMConfig(sync_dir="shared/sync")
    assert VLLMConfig(sync_dir="~/sync").sync_root("/w").is_absolute()


def test_remote_trainers_sharing_a_sync_dir_leave_each_others_dirs_alone(tmp_path):
    from jaxdebate.sampling.vllm.delivery import new_sync_dir

    dead = 2**22 + 17  # above the default pid_max: no such process here
    other_host = tmp_path / f"jaxdebate-vllm-{dead}-0123.another-host.cluster"
    this_host = tmp_path / f"jaxdebate-vllm-{dead}-4567.{socket.gethostname()}"
    other_host.mkdir()
    this_host.mkdir()
    fresh = new_sync_dir(VLLMConfig(sync_dir=str(tmp_path)), tmp_path)
    assert fresh.name.endswith("." + socket.gethostname()) and f"-{os.getpid()}-" in fresh.name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([fresh.name, other_host.name])


def test_a_server_starts_on_one_directory_per_model(monkeypatch, tmp_path, tokenizer):
    """vLLM caches its compiled kernels by the model path: the directory a server is started on (config,
    tokenizer, the weights of the run that made it; each run's own weights follow as a sync) is the same
    for every run of one model, and another for another model or dtype."""
    from safetensors.numpy import load_file as load_tensors

    from jaxdebate.sampling.vllm.delivery import start_dir

    monkeypatch.setenv("JAXDEBATE_CACHE", str(tmp_path / "cache"))
    params, config = load("tiny")
    other_params, other = load("tiny:layers=1")
    first = start_dir(params, config, tokenizer, "float32")
    assert first.parent == tmp_path / "cache" / "vllm" / "models" and (first.parent.stat().st_mode & 0o077) == 0
    assert {"config.json", "generation_config.json", "tokenizer.json", "model.safetensors"} <= {p.name for p in first.iterdir()}
    written = load_tensors(first / "model.safetensors")
    reseeded, _ = load("tiny:seed=5")
    assert start_dir(reseeded, config, tokenizer, "float32") == first  # other weights, same model: same path, kept
    again = load_tensors(first / "model.safetensors")
    assert written.keys() == again.keys() and all(np.array_equal(written[k], again[k]) for k in written)
    assert len({first, start_dir(other_params, other, tokenizer, "float32"), start_dir(params, config, tokenizer, "bfloat16")}) == 3
    (first / "model.safetensors").unlink()  # an incomplete directory (no weights) is made again
    assert start_dir(params, config, tokenizer, "float32") == first and (first / "model.safetensors").is_file()
    assert not list(first.parent.glob(".new-*"))  # no temporary directory left behind


def test_remote_serve_refuses_to_run_without_a_key(monkeypatch, capsys, tmp_path):
    from jaxdebate.sampling.vllm import serve as vllm_serve

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert vllm_serve.main(["--model", str(tmp_path), "--workdir", str(tmp_path)]) == 2
    assert "VLLM_API_KEY" in capsys.readouterr().err
    monkeypatch.setenv("VLLM_API_KEY", "k" * 32)
    assert vllm_serve.main(["--model", str(tmp_path), "--workdir", str(tmp_path), "--kv-cache-gib", "0"]) == 2
    assert "kv_cache_gib must be > 0" in capsys.readouterr().err
