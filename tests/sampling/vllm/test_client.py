"""The vLLM sampler against a real vLLM server process (CPU build, ``.venv-vllm``), one per module.

The server runs in float32 so that its greedy choices can be compared token for token with the JAX
model's; the bf16 production path is measured on SmolLM2 by ``bench/sampler.py``. A tied tiny Llama
(head_dim 64: vLLM's CPU attention needs >= 32) is served; every test pushes the weights it needs.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.errors import ConfigError, SamplerError
from jaxdebate.model.sources import cache_dir
from jaxdebate.sampling.base import Sampler, SamplingParams
from jaxdebate.sampling.vllm.config import VLLMConfig
from real_server import REAL_SERVER

pytestmark = REAL_SERVER

SOURCE = "tiny:hidden=128,heads=2,kv_heads=1,intermediate=256,seed=3"
GREEDY_TOKENS = 12
LOGPROB_TOL = 2e-4  # float32 server vs float32 JAX; measured max |diff| ~1e-6
QUESTIONS = (
    "What is 7 times 8?",
    "Name a prime number larger than 20.",
    "Explain why the sky is blue in one sentence.",
    "Solve for x: 2x + 3 = 11.",
    "Who wrote Hamlet?",
    "What is the capital of Japan?",
    "Give me a synonym for happy.",
)


@pytest.fixture(scope="module")
def model():
    """The tiny Llama with its weights scaled so that outputs depend on the prompt and the layers
    (at its init scale every prompt continues with the same token at near-uniform probabilities)."""
    from jaxdebate.model import load

    params, config = load(SOURCE)

    def scale(path, x):
        name = jax.tree_util.keystr(path)
        if "embed_tokens" in name:
            return x * 50.0
        if "kernel" in name:
            return x * 6.0
        return x * 0.2 if name.startswith("['norm']") else x

    return jax.tree_util.tree_map_with_path(scale, params), config


@pytest.fixture(scope="module")
def prompts(tokenizer):
    short = [tokenizer.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
    story = " ".join(f"Agent {i % 3} says the answer is {i * 7 % 13}." for i in range(40))
    long = tokenizer.encode_chat([{"role": "user", "content": story}])
    assert all(len(p) < 128 for p in short) and len(long) > 256  # several of the CPU server's 32-token KV blocks
    return short + [long]


@pytest.fixture(scope="module")
def sampler(model, tokenizer, tmp_path_factory):
    from jaxdebate.sampling.vllm.client import VLLMSampler

    params, config = model
    cfg = VLLMConfig(dtype="float32", kv_cache_gib=1, max_model_len=1024, startup_timeout_s=900)
    # a relative workdir, as `--workdir runs/x` gives: the server runs in its own state dir as cwd
    workdir = os.path.relpath(tmp_path_factory.mktemp("vllm-run"))
    s = VLLMSampler.from_params(params, config, workdir=workdir, config=cfg,
                                tokenizer=tokenizer, weight_version=0)
    yield s
    s.close()


class Reference:
    """Our JAX side on the same weights: JaxSampler's greedy continuations, the learner's token
    log-probs (``token_logprobs``) and full next-token distributions."""

    def __init__(self, config, tokenizer):
        from jaxdebate.model import logits, token_logprobs
        from jaxdebate.sampling import JaxSampler

        self.config = config
        self._jax = None  # one JaxSampler, so its compiled shapes are reused across tests
        self._make = lambda params: JaxSampler(params, config, tokenizer, max_total_len=1024)
        self._logits = jax.jit(lambda p, ids: logits(p, config, ids))
        self._token_logprobs = token_logprobs

    def greedy(self, params, prompts, steps=GREEDY_TOKENS):
        """JaxSampler's greedy tokens and log-probs (log_softmax(logits)) for every prompt."""
        if self._jax is None:
            self._jax = self._make(params)
        self._jax.update_weights(params, 0)
        out = self._jax.generate(prompts, SamplingParams(temperature=0.0, max_tokens=steps))
        return [list(r[0].token_ids) for r in out], [list(r[0].logprobs) for r in out]

    def logprobs(self, params, prompt, completion, temperature):
        """log_softmax(logits / temperature) of each completion token (the Sampler convention)."""
        seq = jnp.asarray([list(prompt) + list(completion)], jnp.int32)
        lp = self._token_logprobs(params, self.config, seq, temperature=temperature)
        return np.asarray(lp[0, len(prompt):])

    def probs(self, params, prompt, completion, temperature):
        """Full next-token distributions at each completion position (for the top-p check)."""
        seq = jnp.asarray([list(prompt) + list(completion)], jnp.int32)
        logits = np.asarray(self._logits(params, seq))[0, len(prompt) - 1 : -1]
        return np.asarray(jax.nn.softmax(jnp.asarray(logits) / temperature, axis=-1))


@pytest.fixture(scope="module")
def ref(model, tokenizer):
    return Reference(model[1], tokenizer)


def perturb(params, path, scale=0.5, seed=1):
    """A copy of ``params`` with noise added to the leaves whose key path contains ``path``."""
    key = jax.random.PRNGKey(seed)

    def bump(kp, x):
        name = jax.tree_util.keystr(kp)
        if path not in name:
            return x
        noise = jax.random.normal(jax.random.fold_in(key, zlib.crc32(name.encode())), x.shape, x.dtype)
        return x + scale * jnp.std(x) * noise

    return jax.tree_util.tree_map_with_path(bump, params)


def greedy(sampler, prompts, steps=GREEDY_TOKENS):
    out = sampler.generate(prompts, SamplingParams(temperature=0.0, max_tokens=steps))
    assert all(len(r) == 1 for r in out)
    return [r[0] for r in out]


def assert_matches_reference(completions, tokens, lps, version):
    for i, (c, t, lp) in enumerate(zip(completions, tokens, lps)):
        assert list(c.token_ids) == t, f"prompt {i}: vLLM {c.token_ids} vs JAX {t}"
        np.testing.assert_allclose(c.logprobs, lp, atol=LOGPROB_TOL, err_msg=f"prompt {i}")
        ended = bool(t) and t[-1] in _stop_ids()
        assert c.weight_version == version and c.finish_reason == ("stop" if ended else "length")


# ---------------------------------------------------------------------------------------------------


def test_is_a_sampler(sampler):
    assert isinstance(sampler, Sampler)
    stats = sampler.stats()  # the start-up sync (the run's weights on the start directory) is version 0
    assert stats["sampler/restarts"] == 0 and stats["sync/version"] == 0 and stats["sync/export_s"] > 0
    assert sampler.server.running() and sampler.server.log_path.is_file()
    # started on the model's start directory (one path per model: vLLM's compile cache is keyed by it)
    assert sampler.model_dir.parent == cache_dir() / "vllm" / "models"


def test_greedy_after_sync_matches_jax(sampler, model, prompts, ref):
    params, _ = model
    sampler.update_weights(params, 1)
    assert sampler.weight_version == 1 and sampler.last_sync.version == 1
    assert sampler.last_sync.export_s > 0 and sampler.last_sync.reload_s > 0
    tokens, lps = ref.greedy(params, prompts)
    completions = greedy(sampler, prompts)
    # all 8 prompts x 12 tokens equal; log-probs within LOGPROB_TOL
    assert_matches_reference(completions, tokens, lps, version=1)
    assert completions[0].text == sampler_text(completions[0])


def _stop_ids():
    from jaxdebate.model import load_tokenizer

    return load_tokenizer("tiny").stop_ids


def sampler_text(completion):
    from jaxdebate.model import load_tokenizer

    return load_tokenizer("tiny").decode(completion.token_ids)


def test_sampled_logprobs_follow_the_convention(sampler, model, prompts, ref):
    params, _ = model
    sampler.update_weights(params, 2)
    sp = SamplingParams(temperature=0.7, top_p=1.0, max_tokens=10, n=3, seed=11)
    out = sampler.generate(prompts[:3], sp)
    for prompt, comps in zip(prompts[:3], out):
        assert len(comps) == 3 and len({c.token_ids for c in comps}) > 1
        for c in comps:
            expected = ref.logprobs(params, prompt, c.token_ids, 0.7)
            np.testing.assert_allclose(c.logprobs, expected, atol=LOGPROB_TOL)
    again = sampler.generate(prompts[:3], sp)
    assert [[c.token_ids for c in r] for r in again] == [[c.token_ids for c in r] for r in out]
    # one seed for all prompts still gives each prompt its own noise
    same = sampler.generate([prompts[0], prompts[0]], SamplingParams(temperature=1.0, max_tokens=10, seed=5))
    assert same[0][0].token_ids != same[1][0].token_ids


def test_many_seeded_long_prompts_in_one_call(sampler, model, prompts):
    """More prompt tokens than one engine step takes, all seeded: with vLLM's chunked prefill this
    killed the CPU engine (a seeded request's generator cannot be rewound); see server_args."""
    params, _ = model
    sampler.update_weights(params, 14)
    batch = [prompts[-1]] * 12  # 12 x ~300 tokens > the 2048-token step budget
    sp = SamplingParams(temperature=1.0, max_tokens=8, seed=21)
    first = sampler.generate(batch, sp)
    assert sampler.restarts == 0
    assert len({r[0].token_ids for r in first}) > 1  # same prompt, distinct per-prompt noise
    assert [r[0].token_ids for r in sampler.generate(batch, sp)] == [r[0].token_ids for r in first]


def test_per_prompt_params_top_p_and_stop(sampler, model, prompts, ref, tokenizer):
    params, _ = model
    sampler.update_weights(params, 3)
    base = greedy(sampler, prompts[:1], steps=GREEDY_TOKENS)[0]
    text = tokenizer.decode(base.token_ids)
    stop = next(tokenizer.decode([t]).strip() for t in base.token_ids[2:] if tokenizer.decode([t]).strip())
    cut = text.find(stop)
    n_tokens = next(m for m in range(1, len(base.token_ids) + 1)
                    if stop in tokenizer.decode(base.token_ids[:m]))
    per_prompt = [
        SamplingParams(temperature=0.0, max_tokens=GREEDY_TOKENS, stop=(stop,)),
        SamplingParams(temperature=1.0, top_p=0.3, max_tokens=8, n=2, seed=3),
        SamplingParams(temperature=0.9, max_tokens=5, n=4, seed=4),
    ]
    stopped, nucleus, short = sampler.generate(prompts[:3], per_prompt)
    c = stopped[0]
    assert c.finish_reason == "stop" and c.text == text[:cut]
    assert c.token_ids == base.token_ids[:n_tokens]
    assert len(nucleus) == 2 and len(short) == 4
    assert all(len(x.token_ids) == 5 and x.truncated for x in short)
    for x in nucleus:  # every token lies in the top-30% nucleus of the JAX distribution
        probs = ref.probs(params, prompts[1], x.token_ids, 1.0)
        for pos, tok in enumerate(x.token_ids):
            above = probs[pos][probs[pos] > probs[pos][tok]].sum()
            assert above < 0.3 + 1e-4
        # processed log-probs are those of the renormalised nucleus: >= the full-distribution ones
        full = ref.logprobs(params, prompts[1], x.token_ids, 1.0)
        assert np.all(np.asarray(x.logprobs) >= full - LOGPROB_TOL)


def test_perturbed_weights_change_outputs_and_originals_restore_them(sampler, model, prompts, ref):
    params, _ = model
    sampler.update_weights(params, 4)
    before = greedy(sampler, prompts)
    noisy = perturb(params, "layers", scale=0.5)
    sampler.update_weights(noisy, 5)
    changed = greedy(sampler, prompts)
    tokens, lps = ref.greedy(noisy, prompts)
    assert_matches_reference(changed, tokens, lps, version=5)
    assert sum(a.token_ids != b.token_ids for a, b in zip(before, changed)) >= len(prompts) - 1
    sampler.update_weights(params, 6)
    after = greedy(sampler, prompts)
    assert [c.token_ids for c in after] == [c.token_ids for c in before]
    for a, b in zip(after, before):  # equal up to the rounding of a different batch composition
        np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=0, atol=1e-5)
    assert {c.weight_version for c in after} == {6}


def test_tied_embedding_only_update_reaches_the_output_layer(sampler, model, prompts, ref):
    """Perturb ONLY the (tied) embedding: a stale packed lm_head would keep the old output layer."""
    params, config = model
    assert config.tie_word_embeddings and "lm_head" not in params
    noisy = perturb(params, "embed_tokens", scale=1.0, seed=2)
    sampler.update_weights(noisy, 7)
    tokens, lps = ref.greedy(noisy, prompts[:-1])
    assert_matches_reference(greedy(sampler, prompts[:-1]), tokens, lps, version=7)


def test_sync_loads_directly_and_vllms_generic_reload_agrees(sampler, model, prompts, ref):
    """Issue 12 item 3: on the CPU backend the worker loads the sync file itself (no vLLM reload);
    vLLM's generic reload of the same file (the GPU path: matrices as transposed views) serves the
    same tokens and log-probs."""
    params, _ = model
    noisy = perturb(params, "mlp", scale=1.0, seed=9)
    sampler.update_weights(noisy, 20)
    assert sampler.last_sync.total_s < 5.0
    tokens, lps = ref.greedy(noisy, prompts)
    assert_matches_reference(greedy(sampler, prompts), tokens, lps, version=20)
    (path,) = sampler._synced.paths
    # in the run's own sync dir, not in the directory the server starts on (vLLM loads its *.safetensors)
    assert path.parent.parent == sampler._sync_dir and sampler.model_dir not in path.parents
    server = sampler.server
    assert server.collective_rpc("load_weights_files", {"paths": [str(path)]})[0]["mode"] == "direct"
    sampler.update_weights(params, 21)  # the file now holds `params`; reload it the generic way
    generic = server.collective_rpc("load_weights_files", {"paths": [str(path)], "direct": False})[0]
    server.request("/reset_prefix_cache")
    assert generic["mode"] == "vllm" and generic["refreshed"] == ["lm_head"]
    tokens, lps = ref.greedy(params, prompts)
    assert_matches_reference(greedy(sampler, prompts), tokens, lps, version=21)


def test_update_from_an_hf_directory(sampler, model, prompts, ref, tmp_path_factory):
    """An HF export (``[out, in]`` matrices, no layout metadata, no tokenizer) loads like a sync file;
    a restart would start from the model's start directory and load it on top (so it must outlive this
    test: a module-scoped directory)."""
    from jaxdebate.model import export_hf

    params, config = model
    tmp_path = tmp_path_factory.mktemp("hf-update")
    noisy = perturb(params, "self_attn", scale=1.0, seed=10)
    export_hf(noisy, config, tmp_path / "hf", dtype="float32")
    sampler.update_weights(tmp_path / "hf", 22)
    assert sampler._synced.paths == (tmp_path / "hf" / "model.safetensors",)
    tokens, lps = ref.greedy(noisy, prompts)
    assert_matches_reference(greedy(sampler, prompts), tokens, lps, version=22)
    with pytest.raises(ConfigError, match="not an HF model directory"):
        sampler.update_weights(tmp_path, 23)
    sampler.update_weights(params, 23)
    assert sampler._synced.paths[0].parent.parent == sampler._sync_dir


def test_identical_long_prompt_across_a_sync_is_recomputed(sampler, model, prompts, ref):
    """The same >2-block prompt before and after a sync: a stale prefix cache would reuse old KV."""
    params, _ = model
    long = [prompts[-1]]
    sampler.update_weights(params, 8)
    tokens, lps = ref.greedy(params, long)
    assert_matches_reference(greedy(sampler, long), tokens, lps, version=8)
    noisy = perturb(params, "self_attn", scale=1.0, seed=3)
    sampler.update_weights(noisy, 9)
    tokens, lps = ref.greedy(noisy, long)
    assert_matches_reference(greedy(sampler, long), tokens, lps, version=9)


def _prefix_cache_hits(server) -> float:
    """vLLM's counter of prompt tokens served from its prefix cache (``GET /metrics``)."""
    text = server.request("/metrics", method="GET", parse=False)
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:prefix_cache_hits_total"))


def test_a_shared_prompt_head_of_three_blocks_is_served_from_the_prefix_cache(sampler, model, prompts, ref):
    """The CPU server's 32-token KV blocks (sampler.vllm.block_size 0): a second prompt that shares a
    100-token head with the first is prefilled from 3 cached blocks (96 tokens), which vLLM's CPU
    default of 128-token blocks would not reuse at all, and its answer is still the JAX sampler's."""
    params, _ = model
    sampler.update_weights(params, 14)  # a sync empties the prefix cache
    head = prompts[-1][:100]
    first, second = head + prompts[0][-8:], head + prompts[1][-8:]
    greedy(sampler, [first])
    before = _prefix_cache_hits(sampler.server)
    out = greedy(sampler, [second])
    assert _prefix_cache_hits(sampler.server) - before == 96
    tokens, lps = ref.greedy(params, [second])
    assert_matches_reference(out, tokens, lps, version=14)


def test_bare_reload_shows_both_cpu_pitfalls(sampler, model, prompts, ref, tmp_path):
    """Control for the two tests above: vLLM's bare in-place reload serves stale results on CPU,
    so those tests would fail without the head refresh and the prefix-cache reset."""
    from jaxdebate.model import export_hf

    params, config = model
    server = sampler.server
    sampler.update_weights(params, 10)
    greedy(sampler, prompts)  # fills the prefix cache with the long prompt's blocks
    emb = perturb(params, "embed_tokens", scale=1.0, seed=4)
    export_hf(emb, config, tmp_path / "emb", dtype="float32")
    server.collective_rpc("reload_weights", {"weights_path": str(tmp_path / "emb")})
    server.request("/reset_prefix_cache")
    tokens, lps = ref.greedy(emb, prompts[:-1])
    stale = greedy(sampler, prompts[:-1])
    assert all(_differs(c, t, lp) for c, t, lp in zip(stale, tokens, lps))  # the old output layer
    server.collective_rpc("refresh_lm_head")
    server.request("/reset_prefix_cache")
    assert [list(c.token_ids) for c in greedy(sampler, prompts[:-1])] == tokens

    greedy(sampler, prompts[-1:])  # cache the long prompt under `emb`
    attn = perturb(emb, "self_attn", scale=1.0, seed=5)
    export_hf(attn, config, tmp_path / "attn", dtype="float32")
    server.collective_rpc("reload_weights", {"weights_path": str(tmp_path / "attn")})
    server.collective_rpc("refresh_lm_head")
    tokens, lps = ref.greedy(attn, prompts[-1:])
    assert _differs(greedy(sampler, prompts[-1:])[0], tokens[0], lps[0])  # stale cached KV
    server.request("/reset_prefix_cache")
    assert list(greedy(sampler, prompts[-1:])[0].token_ids) == tokens[0]
    sampler.update_weights(params, 11)  # back to a consistent state


def _differs(completion, tokens, logprobs, tol=1e-2) -> bool:
    """The server's greedy continuation is not the reference's: other tokens, or the same tokens
    with log-probs off by more than ``tol`` (a degenerate model can pick the same tokens)."""
    if list(completion.token_ids) != tokens:
        return True
    return float(np.max(np.abs(np.asarray(completion.logprobs) - np.asarray(logprobs)))) > tol


def test_sync_waits_for_running_calls_and_tags_versions(sampler, model, prompts, ref):
    params, _ = model
    sampler.update_weights(params, 12)
    noisy = perturb(params, "mlp", scale=1.0, seed=6)
    long_call: dict = {}

    def run():
        long_call["out"] = sampler.generate(prompts[:4], SamplingParams(temperature=0.0, max_tokens=200))

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)
    sampler.update_weights(noisy, 13)  # waits for a call already running
    thread.join()
    old = long_call["out"]
    version = old[0][0].weight_version
    assert {r[0].weight_version for r in old} == {version} and version in (12, 13)
    tokens, _ = ref.greedy(params if version == 12 else noisy, prompts[:4], steps=200)
    assert [list(r[0].token_ids) for r in old] == tokens  # the tag names the weights that produced it
    new = greedy(sampler, prompts[:4])
    tokens, _ = ref.greedy(noisy, prompts[:4])
    assert [list(c.token_ids) for c in new] == tokens and {c.weight_version for c in new} == {13}


def test_bad_requests_are_clear_errors(sampler, prompts):
    with pytest.raises(SamplerError, match="prompt 1 has 2000 tokens"):
        sampler.generate([prompts[0], [5] * 2000], SamplingParams(temperature=0.0, max_tokens=4))
    with pytest.raises(SamplerError, match="rejected"):
        sampler.generate([[10**7]], SamplingParams(temperature=0.0, max_tokens=4))
    with pytest.raises(SamplerError, match="prompt 0 is empty"):
        sampler.generate([[]], SamplingParams(max_tokens=4))
    # the context limit clamps max_tokens instead of failing
    near = sampler.generate([[7] * 1020], SamplingParams(temperature=0.0, max_tokens=50))[0][0]
    assert len(near.token_ids) == 4 and near.finish_reason == "length"


def test_greedy_with_several_samples_is_one_answer_repeated(sampler, model, prompts, ref):
    """Issue 23 item 1: vLLM refuses greedy n > 1 (400), which crashed every debate validation (A
    agents ask one prompt for A greedy answers); the sampler asks once and repeats the answer."""
    sampler.update_weights(model[0], 0)
    sp = SamplingParams(temperature=0.0, max_tokens=GREEDY_TOKENS, n=3)
    got = sampler.generate(prompts[:2], sp)
    tokens, lps = ref.greedy(model[0], prompts[:2])
    for completions, t in zip(got, tokens):
        assert len(completions) == 3 and all(list(c.token_ids) == t for c in completions)
    assert [c.token_ids for c in sampler.submit(prompts[0], sp).result(timeout=300)] == [tuple(tokens[0])] * 3


def test_submit_answers_like_a_one_prompt_generate(sampler, prompts):
    """The streaming interface the debate protocol uses: same seeds, same samples as generate."""
    from jaxdebate.sampling.base import StreamingSampler

    assert isinstance(sampler, StreamingSampler)
    sp = SamplingParams(temperature=1.0, max_tokens=8, n=2, seed=5)
    futures = [sampler.submit(p, sp) for p in prompts[:3]]
    for p, future in zip(prompts[:3], futures):
        got = future.result(timeout=300)
        want = sampler.generate([p], sp)[0]
        assert [c.token_ids for c in got] == [c.token_ids for c in want] and len(got) == 2
        assert all(c.weight_version == sampler.weight_version for c in got)


def test_the_server_answers_only_its_owner(sampler, model, prompts, ref, tmp_path):
    """Issue 14 item 9: the dev endpoints (``/collective_rpc`` can reload weights from any path) and
    the OpenAI routes need the per-start key; ``/health`` stays open; the key is in no argv or log."""
    import http.client
    import urllib.parse

    from jaxdebate.model import export_hf

    server = sampler.server
    url = urllib.parse.urlsplit(server.url)

    def raw(method, path, body=None, key=None):
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        status = conn.getresponse().status
        conn.close()
        return status

    params, config = model
    sampler.update_weights(params, 12)
    noisy = perturb(params, "self_attn", scale=1.0, seed=6)
    export_hf(noisy, config, tmp_path / "intruder", dtype="float32")
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(tmp_path / "intruder")}}
    for key in (None, "wrong", ""):
        assert raw("POST", "/collective_rpc", rpc, key) == 401
        assert raw("PUT", "/jaxdebate/weights?name=w.safetensors", {"x": 1}, key) == 401
        assert raw("POST", "/reset_prefix_cache", None, key) == 401
        assert raw("GET", "/v1/models", None, key) == 401
        assert raw("POST", "/v1/completions", {"model": "x", "prompt": [1, 2], "max_tokens": 1}, key) == 401
    assert raw("GET", "/health") == 200
    tokens, lps = ref.greedy(params, prompts[:2])
    assert_matches_reference(greedy(sampler, prompts[:2]), tokens, lps, version=12)  # nothing reloaded

    key = server._key
    assert len(key) >= 32 and raw("GET", "/v1/models", None, key) == 200
    assert key not in server.log_path.read_text(errors="replace")
    for pid in [server.pid, *(int(p) for p in os.listdir("/proc") if p.isdigit())]:
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        assert key not in cmdline
    sock = server._socket_dir
    assert sock.stat().st_mode & 0o777 == 0o700
    assert sampler._sync_dir.stat().st_mode & 0o777 == 0o700


def test_killed_server_is_restarted_and_the_loop_keeps_its_steps(sampler, model, prompts, ref, monkeypatch):
    """A training-like loop (sample, then sync) where the server is SIGKILLed mid-call at step 2.

    The kill is made by the call's own first completion request, just before it goes out, so that it
    lands inside the call on any machine (a timer lost the race on a fast one: the call had finished);
    the call's other requests are then in flight on the dying server or find it gone."""
    params, _ = model
    versions = [params, perturb(params, "mlp", 0.5, 7), perturb(params, "mlp", 0.5, 8), params]
    expected = [ref.greedy(p, prompts[:4], steps=200)[0] for p in versions]
    sampler.update_weights(versions[0], 100)
    restarts = sampler.restarts
    steps, killed = [], []
    send = sampler.server.request
    once = threading.Lock()

    def kill_then_send(path, *args, **kwargs):
        if path == "/v1/completions" and once.acquire(blocking=False):
            pid = sampler.server.pid
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        return send(path, *args, **kwargs)

    for step in range(4):
        if step == 2:
            monkeypatch.setattr(sampler.server, "request", kill_then_send)
        out = sampler.generate(prompts[:4], SamplingParams(temperature=0.0, max_tokens=200))
        steps.append([list(r[0].token_ids) for r in out])
        if step == 2:
            monkeypatch.undo()
            assert killed, "the server was not killed during the call"
        assert {r[0].weight_version for r in out} == {100 + step}
        if step + 1 < len(versions):
            sampler.update_weights(versions[step + 1], 100 + step + 1)
    assert killed and sampler.restarts == restarts + 1
    assert len(steps) == 4 and steps == expected
    with pytest.raises(ProcessLookupError):  # the killed server's engine and workers are gone too
        os.killpg(killed[0], 0)


def test_a_run_on_a_shared_server_that_dies_goes_on_with_its_own_and_the_owners_sync_restarts_it(
        sampler, model, tokenizer, prompts, ref, monkeypatch, tmp_path):
    """A sweep's shared server (``jaxdebate.sampling.vllm.shared``; here the module's server, which is the
    one this config starts): a second sampler built with the same config samples on it instead of
    starting one, and when it dies mid-call goes on with a server of its own, which loads the last sync
    and answers as the JAX sampler does.

    The owner finds its server dead only at its next weight sync (between steps): the sync shares the
    request path's recovery, restarts the server and still lands (greedy == the JAX sampler on the new
    weights). One kill serves both cases: a server start is the longest thing a test here waits for."""
    from jaxdebate.sampling.vllm.client import VLLMSampler
    from jaxdebate.sampling.vllm.shared import ENV, SharedServer, server_digest

    params, config = model
    shared = SharedServer(sampler.server.url, sampler.server.key, server_digest(sampler.config, sampler.model_dir))
    monkeypatch.setenv(ENV, shared.env()[ENV])
    first = perturb(params, "mlp", 0.5, 11)
    expected = ref.greedy(first, prompts[:4], steps=64)[0]
    with VLLMSampler.from_params(first, config, workdir=tmp_path / "run", config=sampler.config,
                                 tokenizer=tokenizer, weight_version=1) as run:
        assert run.server.external and run.server.url == sampler.server.url and run.stats()["sampler/shared_server"] == 1
        assert not (tmp_path / "run" / "vllm" / "server.log").exists()  # nothing started
        send, killed = run.server.request, []

        def kill_then_send(path, *args, **kwargs):
            if path == "/v1/completions" and not killed:
                killed.append(sampler.server.pid)
                os.kill(sampler.server.pid, signal.SIGKILL)
            return send(path, *args, **kwargs)

        monkeypatch.setattr(run.server, "request", kill_then_send)
        out = run.generate(prompts[:4], SamplingParams(temperature=0.0, max_tokens=64))
        assert killed and run.restarts == 1 and not run.server.external and run.stats()["sampler/shared_server"] == 0
        assert [list(r[0].token_ids) for r in out] == expected and {r[0].weight_version for r in out} == {1}
        assert (tmp_path / "run" / "vllm" / "server.log").is_file()

    new = perturb(params, "mlp", 0.5, 9)
    expected = ref.greedy(new, prompts[:2], steps=64)[0]
    restarts = sampler.restarts
    sampler.update_weights(new, 300)
    assert sampler.restarts == restarts + 1 and sampler.syncs[-1].restarted
    out = sampler.generate(prompts[:2], SamplingParams(temperature=0.0, max_tokens=64))
    assert [list(r[0].token_ids) for r in out] == expected
    assert {r[0].weight_version for r in out} == {300}
    sampler.update_weights(params, 301)


def test_greedy_memo_streams_and_answers_repeats_once(sampler, model, prompts, ref):
    """The validation's greedy memo over the streaming server: a repeat submitted while its first
    request is in flight, and one submitted after it finished, get the server's answer on futures of
    their own (the protocol keys its in-flight requests by future)."""
    from jaxdebate.sampling.base import StreamingSampler
    from jaxdebate.sampling.memo import memoize_greedy

    sampler.update_weights(model[0], 0)
    sp = SamplingParams(temperature=0.0, max_tokens=GREEDY_TOKENS)
    with memoize_greedy(sampler) as memo:
        assert isinstance(memo, StreamingSampler)
        first, repeat = memo.submit(prompts[0], sp), memo.submit(prompts[0], sp)
        assert first is not repeat
        tokens, _ = ref.greedy(model[0], prompts[:1])
        assert [c.token_ids for c in first.result(timeout=300)] == [tuple(tokens[0])]
        assert [c.token_ids for c in repeat.result(timeout=300)] == [tuple(tokens[0])]
        later = memo.submit(prompts[0], sp)
        assert later.done() and [c.token_ids for c in later.result()] == [tuple(tokens[0])]
        assert (memo.misses, memo.hits) == (1, 2)
        sampled = memo.submit(prompts[1], SamplingParams(temperature=1.0, max_tokens=4, seed=3))
        assert len(sampled.result(timeout=300)) == 1 and (memo.misses, memo.hits) == (1, 2)


def test_close_stops_every_server_process(sampler):
    pgid, sync_dir = sampler.server.pid, sampler._sync_dir
    sampler.close()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert not sync_dir.exists()
    with pytest.raises(SamplerError, match="closed"):
        sampler.generate([[1, 2]], SamplingParams())
