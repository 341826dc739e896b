"""A sampler whose vLLM server runs elsewhere (issue 16 item 4): the server is started on its own,
with ``python -m jaxdebate.sampling.vllm.serve``, its own workdir and key, and — where this machine
allows a private mount namespace — its own empty ``/dev/shm``, so it cannot read the trainer's sync
dir. The trainer reaches it by ``sampler.vllm.url`` and pushes weights over HTTP.

The served model has an untied LM head (the other vLLM tests serve a tied one) and starts from
other weights than the trainer's, so every check below needs the pushed weights. Float32, so the
greedy tokens equal the JAX sampler's (select with ``pytest -k remote``).
"""

from __future__ import annotations

import http.client
import os
import secrets
import shutil
import signal
import subprocess
import sys
import urllib.parse

import jax
import pytest

from jaxdebate.errors import SamplerError
from jaxdebate.processes import wait_until
from jaxdebate.sampling.vllm.config import VLLMConfig
from jaxdebate.sampling.vllm.server import VLLMServer, free_port
from real_server import REAL_SERVER
from test_client import QUESTIONS, Reference, assert_matches_reference, greedy, perturb

pytestmark = REAL_SERVER

SOURCE = "tiny:hidden=128,heads=2,kv_heads=1,intermediate=256,tie=false,seed=5"
SERVER_START = "tiny:hidden=128,heads=2,kv_heads=1,intermediate=256,tie=false,seed=6"


def _scaled(source):
    """A tiny untied Llama whose outputs depend on the prompt (see test_client.model)."""
    from jaxdebate.model import load

    params, config = load(source)

    def scale(path, x):
        name = jax.tree_util.keystr(path)
        if "embed_tokens" in name or "lm_head" in name:
            return x * 50.0 if "embed_tokens" in name else x * 6.0
        if "kernel" in name:
            return x * 6.0
        return x * 0.2 if name.startswith("['norm']") else x

    return jax.tree_util.tree_map_with_path(scale, params), config


def _private_shm() -> bool:
    """True when a child can get its own empty /dev/shm (``unshare -m``: root or user namespaces)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && test -z \"$(ls -A /dev/shm)\""],
                           capture_output=True)
    return probe.returncode == 0


# the server's command, made to die with this test process (PR_SET_PDEATHSIG = 1) if it is killed
_WITH_PARENT = ("import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGTERM); "
                "os.execvp(sys.argv[1], sys.argv[1:])")


@pytest.fixture(scope="module")
def model():
    return _scaled(SOURCE)


@pytest.fixture(scope="module")
def remote(tmp_path_factory, tokenizer):
    """``(url, key, isolated)`` of a server started like on another host, from other weights."""
    from jaxdebate.model import export_hf

    home = tmp_path_factory.mktemp("remote-host")
    start_params, start_config = _scaled(SERVER_START)
    export_hf(start_params, start_config, home / "model", tokenizer=tokenizer, dtype="float32")
    key, port = secrets.token_urlsafe(32), free_port()
    serve = [sys.executable, "-m", "jaxdebate.sampling.vllm.serve", "--model", str(home / "model"),
             "--workdir", str(home / "work"), "--host", "127.0.0.1", "--port", str(port),
             "--dtype", "float32", "--kv-cache-gib", "1", "--max-model-len", "1024",
             "--python", str(VLLMConfig().python_path())]
    isolated = _private_shm()
    if isolated:  # the server's /dev/shm is a fresh tmpfs: the trainer's sync dirs are not there
        serve = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"', "sh", *serve]
    env = {**os.environ, "VLLM_API_KEY": key}
    log = open(home / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-c", _WITH_PARENT, *serve], cwd=home, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    probe = VLLMServer(VLLMConfig(url=url), home)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the remote server exited:\n{(home / 'serve.log').read_text()[-4000:]}")
        return probe.healthy(timeout=2.0)

    try:
        if not wait_until(up, 900, 1.0):
            raise RuntimeError(f"the remote server did not start:\n{(home / 'serve.log').read_text()[-4000:]}")
        yield url, key, isolated
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def sampler(remote, model, tokenizer, tmp_path_factory):
    from jaxdebate.sampling.vllm.client import VLLMSampler

    url, key, _ = remote
    params, config = model
    old = os.environ.get("VLLM_API_KEY")
    os.environ["VLLM_API_KEY"] = key
    try:
        cfg = VLLMConfig(url=url, sync="push", dtype="float32", startup_timeout_s=60)
        s = VLLMSampler.from_params(params, config, workdir=tmp_path_factory.mktemp("trainer"), config=cfg,
                                    tokenizer=tokenizer, weight_version=0)
    finally:
        if old is None:
            os.environ.pop("VLLM_API_KEY", None)
        else:
            os.environ["VLLM_API_KEY"] = old
    yield s
    s.close()


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [tokenizer.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS]


@pytest.fixture(scope="module")
def ref(model, tokenizer):
    return Reference(model[1], tokenizer)


def test_remote_push_sync_matches_jax(sampler, model, prompts, ref):
    """The weights reach the server only by the push: greedy == the JaxSampler on the same weights."""
    params, _ = model
    assert sampler.server.external and sampler._sync_dir is None and sampler.model_dir is None
    assert not list(VLLMConfig().sync_root(".").glob(f"jaxdebate-vllm-{os.getpid()}-*"))
    first = sampler.last_sync
    assert first.version == 0 and first.upload_s > 0 and first.export_s > 0
    tokens, lps = ref.greedy(params, prompts)
    assert_matches_reference(greedy(sampler, prompts), tokens, lps, version=0)

    noisy = perturb(params, "layers", scale=0.5, seed=11)
    sampler.update_weights(noisy, 1)
    tokens, lps = ref.greedy(noisy, prompts)
    assert_matches_reference(greedy(sampler, prompts), tokens, lps, version=1)
    stats = sampler.stats()
    assert stats["sync/version"] == 1 and stats["sync/upload_s"] > 0


def test_remote_push_reaches_an_untied_output_layer(sampler, model, prompts, ref):
    params, _ = model
    assert "lm_head" in params
    noisy = perturb(params, "lm_head", scale=1.0, seed=12)
    sampler.update_weights(noisy, 2)
    tokens, lps = ref.greedy(noisy, prompts)
    assert_matches_reference(greedy(sampler, prompts), tokens, lps, version=2)


def test_remote_push_of_an_hf_directory(sampler, model, prompts, ref, tmp_path):
    from jaxdebate.model import export_hf

    params, config = model
    noisy = perturb(params, "mlp", scale=1.0, seed=13)
    export_hf(noisy, config, tmp_path / "hf", dtype="float32")
    sampler.update_weights(tmp_path / "hf", 3)
    tokens, lps = ref.greedy(noisy, prompts)
    assert_matches_reference(greedy(sampler, prompts), tokens, lps, version=3)
    sampler.update_weights(params, 4)


def test_remote_upload_route_needs_the_servers_key(sampler, remote):
    url, key, _ = remote
    target = urllib.parse.urlsplit(url)

    def put(path, body, auth):
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        headers = {"Content-Type": "application/octet-stream"}
        if auth is not None:
            headers["Authorization"] = f"Bearer {auth}"
        conn.request("PUT" if body is not None else "GET", path, body=body, headers=headers)
        status = conn.getresponse().status
        conn.close()
        return status

    for auth in (None, "", "wrong"):
        assert put("/jaxdebate/weights?name=w.safetensors", b"x" * 10, auth) == 401
    assert put("/jaxdebate/weights?name=../escape", b"x", key) == 400
    assert put("/jaxdebate/weights?name=w.safetensors", None, key) == 405
    assert put("/health", None, None) == 200


def test_remote_server_cannot_read_the_trainers_sync_dir(remote, model, tokenizer, tmp_path):
    """Control: a path sync to the isolated server fails, so the push is what the tests above use."""
    from jaxdebate.sampling.vllm.client import VLLMSampler

    url, key, isolated = remote
    if not isolated:
        pytest.skip("no private mount namespace here: the server shares this machine's /dev/shm")
    params, config = model
    os.environ["VLLM_API_KEY"] = key
    try:
        cfg = VLLMConfig(url=url, sync="path", dtype="float32", max_restarts=0, startup_timeout_s=60)
        with pytest.raises(SamplerError, match="No such file or directory"):
            VLLMSampler.from_params(params, config, workdir=tmp_path, config=cfg, tokenizer=tokenizer)
    finally:
        os.environ.pop("VLLM_API_KEY", None)
    assert not list(VLLMConfig().sync_root(".").glob(f"jaxdebate-vllm-{os.getpid()}-*"))  # cleaned up
    assert VLLMServer(VLLMConfig(url=url), tmp_path).healthy()  # a failed load leaves it serving
