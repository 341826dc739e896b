"""In-process JAX sampler: jitted prefill + decode over the KV cache (DESIGN §6).

Each ``generate`` call groups its ``prompt x n`` rows into batches; a batch is left-padded to static,
bucketed shapes (rows and new tokens: powers of two; prompt widths:
:func:`jaxdebate.shapes.prompt_bucket`) so prompts of new lengths reuse the compiled code. The
distinct prompts of a batch are prefilled once and their caches copied to their ``n`` rows; prompts that start alike (a system prompt, a worked example, a debate's question) share one
prefill of their common prefix (:func:`jaxdebate.shapes.group_prefixes`); decoding is a
``lax.while_loop`` over tokens that exits as soon as every row is done. Between decode chunks
(``decode_chunk`` tokens) the host checks stop strings and drops finished rows (``shrink``).

Sampling draws one uniform per row and step from a key derived from ``(seed, prompt index, sample
index, step)``, so a seeded request gives the same samples whatever else shares its batch.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdebate.errors import ConfigError, SamplerError
from jaxdebate.model.config import DTYPES, LlamaConfig
from jaxdebate.model.mesh import batch_sharding, shard_params
from jaxdebate.sampling.base import Completion, SamplingParams, per_prompt_params
from jaxdebate.sampling.decoding import decode, prefill, row_keys
from jaxdebate.shapes import CACHE_STEP, group_prefixes, prompt_bucket, round_size, round_up

_OUTPUTS = ("tokens", "logprobs", "length", "stopped")  # the decode state's per-row results


class JaxSampler:
    """The Sampler protocol on an in-process Flax Llama.

    ``max_total_len`` bounds prompt + completion (default ``min(max_position_embeddings, 2048)``);
    completions that reach it end with ``finish_reason="length"``. ``max_batch`` bounds the rows
    (prompts x n) decoded together. ``stop_ids`` (default ``tokenizer.stop_ids``) end a completion.
    ``mesh``: place parameters (replicated) and batch rows on a device mesh. ``seed`` seeds requests
    whose SamplingParams have no seed. The sampler keeps a reference to ``params``: do not donate them.
    Decoding runs in chunks of ``decode_chunk`` tokens; with ``shrink`` the finished rows are dropped
    between chunks once the rest fit a row bucket half the size (the same samples: each row keeps its
    own keys), so a batch no longer decodes every row until its longest completion ends.
    ``dtype`` (default ``config.dtype``) is the compute dtype: with ``bfloat16`` the sampler keeps a
    bf16 copy of the weights (cast once per ``update_weights``) and a bf16 KV cache; logits and
    log-probs stay float32. The matmuls' operands are always in that dtype: ``config.dot_dtype`` is
    the learner's option and is reset here.
    """

    def __init__(
        self,
        params: Any,
        config: LlamaConfig,
        tokenizer: Any,
        *,
        max_total_len: int | None = None,
        max_batch: int = 64,
        decode_chunk: int = 8,
        shrink: bool = True,
        min_prompt_bucket: int = 16,
        min_new_bucket: int = 16,
        stop_ids: Sequence[int] | None = None,
        mesh: Any = None,
        seed: int = 0,
        weight_version: int = 0,
        dtype: str | None = None,
    ) -> None:
        if dtype is not None and dtype not in DTYPES:
            raise ConfigError(f"sampler dtype must be one of {DTYPES}, got {dtype!r}")
        if config.dot_dtype != "compute":  # a learner-only option: samples and validations keep their numerics
            config = dataclasses.replace(config, dot_dtype="compute")
        if dtype is not None and dtype != config.dtype:
            config = dataclasses.replace(config, dtype=dtype)
        limit = min(config.max_position_embeddings, 2048) if max_total_len is None else max_total_len
        if not 2 <= limit <= config.max_position_embeddings:
            raise ConfigError(
                f"sampler.max_total_len must be in [2, {config.max_position_embeddings}] "
                f"(the model's max_position_embeddings), got {limit}"
            )
        for name, value in (("max_batch", max_batch), ("decode_chunk", decode_chunk),
                            ("min_prompt_bucket", min_prompt_bucket), ("min_new_bucket", min_new_bucket)):
            if value < 1:
                raise ConfigError(f"sampler.{name} must be >= 1, got {value}")
        self.config = config
        self.tokenizer = tokenizer
        self.max_total_len = limit
        self.mesh = mesh
        self._min_rows = 1 if mesh is None else mesh.devices.size
        self.max_batch = max(round_size(max_batch), self._min_rows)
        self.decode_chunk = decode_chunk
        self.shrink = shrink
        self.min_prompt_bucket = min_prompt_bucket
        self.min_new_bucket = min_new_bucket
        self.stop_ids = tuple(sorted({int(t) for t in (tokenizer.stop_ids if stop_ids is None else stop_ids)}))
        self._pad_id = int(getattr(tokenizer, "pad_id", 0))
        self._seeds = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._params = None
        self._version = 0
        self._prefill = jax.jit(functools.partial(prefill, config=config), static_argnums=(7,))
        self._decode = {}
        self.decoded_row_steps = 0  # rows x decode steps run so far (what shrinking saves)
        # wall seconds spent in the prefill and the decode programs so far (compilation included)
        self.prefill_seconds = 0.0
        self.decode_seconds = 0.0
        self.update_weights(params, weight_version)

    # ---------------------------------------------------------------- protocol

    @property
    def weight_version(self) -> int:
        return self._version

    def update_weights(self, params: Any, version: int) -> None:
        """Serve ``params`` from now on; later completions carry ``version``."""
        if self.config.dtype == "bfloat16":
            # cast once here, not per forward: a bf16 layer would otherwise re-cast its f32 kernel
            # at every decode step
            params = jax.tree.map(lambda x: x.astype(jnp.bfloat16) if jnp.issubdtype(x.dtype, jnp.floating) else x,
                                  params)
        placed = params if self.mesh is None else shard_params(params, self.mesh)
        with self._lock:
            self._params = placed
            self._version = int(version)

    def close(self) -> None:
        """Drop the parameters and compiled functions; later calls raise SamplerError."""
        with self._lock:
            self._params = None
            self._decode.clear()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams],
    ) -> list[list[Completion]]:
        per_prompt = per_prompt_params(prompts, params)
        with self._lock:
            if self._params is None:
                raise SamplerError("the JAX sampler is closed")
            prompts = [self._check_prompt(i, p) for i, p in enumerate(prompts)]
            seeds = [int(self._seeds.integers(0, 2**31 - 1)) if sp.seed is None else int(sp.seed)
                     for sp in per_prompt]
            rows = [(i, j) for i, sp in enumerate(per_prompt) for j in range(sp.n)]
            rows.sort(key=lambda r: len(prompts[r[0]]))  # similar lengths share a batch
            results: dict[tuple[int, int], Completion] = {}
            for start in range(0, len(rows), self.max_batch):
                batch = rows[start:start + self.max_batch]
                for row, completion in zip(batch, self._run_batch(batch, prompts, per_prompt, seeds)):
                    results[row] = completion
            return [[results[(i, j)] for j in range(sp.n)] for i, sp in enumerate(per_prompt)]

    def stats(self) -> dict[str, float]:
        """How many prefill and decode shapes are compiled (rising late in a run means recompiles), and
        the wall seconds spent in each so far: whether sampling and validation go to the prompts' forward
        or to the token-by-token loop."""
        return {**{f"sampler/compiled_{k}_shapes": float(v) for k, v in self.compile_counts().items()},
                "sampler/prefill_seconds": self.prefill_seconds, "sampler/decode_seconds": self.decode_seconds}

    def compile_counts(self) -> dict[str, int]:
        """How many shapes the prefill and decode functions were compiled for (a recompilation check)."""
        return {
            "prefill": self._prefill._cache_size(),
            "decode": sum(f._cache_size() for f in self._decode.values()),
        }

    def __enter__(self) -> JaxSampler:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------- internals

    def _check_prompt(self, index: int, prompt: Sequence[int]) -> list[int]:
        ids = [int(t) for t in prompt]
        if not ids:
            raise SamplerError(f"prompt {index} is empty")
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise SamplerError(f"prompt {index} holds token id {bad[0]} outside the vocabulary "
                               f"[0, {self.config.vocab_size})")
        if len(ids) >= self.max_total_len:
            raise SamplerError(f"prompt {index} has {len(ids)} tokens: no room left to generate within "
                               f"max_total_len={self.max_total_len}")
        return ids

    def _decode_fn(self, use_top_p: bool):
        if use_top_p not in self._decode:
            self._decode[use_top_p] = jax.jit(
                functools.partial(decode, config=self.config, stop_ids=self.stop_ids, use_top_p=use_top_p),
                donate_argnums=(1,),
            )
        return self._decode[use_top_p]

    def _place(self, x: np.ndarray) -> jax.Array:
        if self.mesh is None:
            return jnp.asarray(x)
        return jax.device_put(x, batch_sharding(self.mesh, x.ndim))

    def _run_batch(self, rows, prompts, per_prompt, seeds) -> list[Completion]:
        distinct = sorted({i for i, _ in rows})
        groups = group_prefixes([prompts[i] for i in distinct], [len(prompts[i]) - 1 for i in distinct],
                                [len(prompts[i]) for i in distinct], min_prefix=self.min_prompt_bucket)
        slot, group_of, shared = {}, [], {}
        for g, (prefix, members) in enumerate(groups):
            for k in members:
                slot[distinct[k]] = len(group_of)
                group_of.append(g)
                shared[distinct[k]] = prefix
        longest_head = max(prefix for prefix, _ in groups)
        head_width = prompt_bucket(longest_head, self.min_prompt_bucket) if longest_head else 0
        width = prompt_bucket(max(len(prompts[i]) - shared[i] for i in distinct), self.min_prompt_bucket)
        n_prompts = round_size(len(distinct), multiple=self._min_rows)
        n_rows = round_size(len(rows), multiple=self._min_rows)
        max_new = [min(per_prompt[i].max_tokens, self.max_total_len - len(prompts[i])) for i, _ in rows]
        new_len = round_size(max(max_new), self.min_new_bucket)

        heads = np.full((round_size(len(groups)), head_width), self._pad_id, np.int32)
        head_mask = np.zeros(heads.shape, bool)
        for g, (prefix, members) in enumerate(groups):
            if prefix:
                heads[g, head_width - prefix:] = prompts[distinct[members[0]]][:prefix]
                head_mask[g, head_width - prefix:] = True
        by_slot = sorted(slot, key=slot.get)
        ids = np.full((n_prompts, width), self._pad_id, np.int32)
        mask = np.zeros((n_prompts, width), bool)
        group = np.zeros(n_prompts, np.int32)
        for k in range(n_prompts):
            i = by_slot[min(k, len(by_slot) - 1)]  # filler rows repeat a real prompt
            p = prompts[i][shared[i]:]
            ids[k, width - len(p):] = p
            mask[k, width - len(p):] = True
            group[k] = group_of[min(k, len(by_slot) - 1)]
        row_prompt = np.zeros(n_rows, np.int32)
        temperature = np.zeros(n_rows, np.float32)
        top_p = np.ones(n_rows, np.float32)
        limit = np.zeros(n_rows, np.int32)
        key_ids = np.zeros((n_rows, 3), np.int32)
        done = np.ones(n_rows, bool)
        for r, (i, j) in enumerate(rows):
            sp = per_prompt[i]
            row_prompt[r] = slot[i]
            temperature[r] = sp.temperature
            top_p[r] = sp.top_p if sp.temperature > 0 else 1.0
            limit[r] = max_new[r]
            key_ids[r] = (seeds[i], i, j)
            done[r] = False
        use_top_p = bool((top_p < 1.0).any())

        params = self._params
        started = time.perf_counter()
        logits, cache, pos = self._prefill(params, jnp.asarray(heads), jnp.asarray(head_mask), jnp.asarray(group),
                                           self._place(ids), self._place(mask), jnp.asarray(row_prompt),
                                           round_up(head_width + width + new_len, CACHE_STEP))
        jax.block_until_ready(logits)  # the decode waits for it anyway; this only makes the split measurable
        self.prefill_seconds += time.perf_counter() - started
        state = {
            "cache": cache,
            "logits": logits,
            "pos": pos,
            "step": jnp.zeros((), jnp.int32),
            "keys": self._place(np.asarray(row_keys(jnp.asarray(key_ids)))),
            "temperature": self._place(temperature),
            "top_p": self._place(top_p),
            "max_new": self._place(limit),
            "tokens": self._place(np.zeros((n_rows, new_len), np.int32)),
            "logprobs": self._place(np.zeros((n_rows, new_len), np.float32)),
            "length": self._place(np.zeros(n_rows, np.int32)),
            "stopped": self._place(np.zeros(n_rows, bool)),
            "done": self._place(done),
        }
        decode_fn = self._decode_fn(use_top_p)
        stops = [per_prompt[i].stop for i, _ in rows]
        check_strings = any(stops)
        chunked = check_strings or self.shrink
        cut: dict[int, tuple[int, str]] = {}  # row -> (tokens kept, text) for stop-string hits
        # Outputs by original row; ``where[k]`` is the original row of state row k (-1: filler).
        out = {name: np.zeros(state[name].shape, state[name].dtype) for name in _OUTPUTS}
        where = np.arange(n_rows)
        where[len(rows):] = -1
        step = 0
        while True:
            until = min(step + self.decode_chunk, new_len) if chunked else new_len
            started = time.perf_counter()
            state = decode_fn(params, state, jnp.asarray(until, jnp.int32))
            self.decoded_row_steps += len(where) * (int(state["step"]) - step)  # the loop may exit early
            self.decode_seconds += time.perf_counter() - started
            step = until
            done = np.array(state["done"])
            if check_strings:
                tokens, length = np.asarray(state["tokens"]), np.asarray(state["length"])
                for k, r in enumerate(where):
                    if r >= 0 and stops[r] and r not in cut:
                        hit = self._find_stop(tokens[k, :length[k]], stops[r])
                        if hit is not None:
                            cut[r] = hit
                            done[k] = True
                state["done"] = self._place(done)
            if done.all() or step >= new_len:
                break
            if self.shrink and new_len - step > self.decode_chunk:
                state, where = self._drop_finished(state, where, done, out)
        self._collect(state, where, out)

        tokens, logprobs, length, stopped = (out[name] for name in _OUTPUTS)
        results = []
        for r in range(len(rows)):
            if r in cut:
                n, text = cut[r]
                results.append(Completion(tuple(tokens[r, :n].tolist()), text, tuple(logprobs[r, :n].tolist()),
                                          "stop", self._version))
                continue
            n = int(length[r])
            ids_r = tokens[r, :n].tolist()
            text_ids = ids_r[:-1] if stopped[r] else ids_r
            results.append(Completion(tuple(ids_r), self.tokenizer.decode(text_ids),
                                      tuple(logprobs[r, :n].tolist()), "stop" if stopped[r] else "length",
                                      self._version))
        return results

    def _collect(self, state: dict, where: np.ndarray, out: dict) -> None:
        """Copy the outputs of the state's rows to their original rows in ``out``."""
        real = where >= 0
        for name in _OUTPUTS:
            out[name][where[real]] = np.asarray(state[name])[real]

    def _drop_finished(self, state: dict, where: np.ndarray, done: np.ndarray, out: dict):
        """Continue with only the unfinished rows once they fit a row bucket half the size or less:
        a batch otherwise decodes every row until its longest completion ends. Rows keep their own
        sampling keys, so the samples do not depend on which rows share the batch."""
        active = np.flatnonzero(~done & (where >= 0))
        size = round_size(len(active), multiple=self._min_rows)
        if size > len(where) // 2:
            return state, where
        self._collect(state, where, out)
        keep = np.concatenate([active, np.full(size - len(active), np.flatnonzero(done)[0])])  # fillers: done
        index = jnp.asarray(keep.astype(np.int32))
        cache = state["cache"]
        smaller = {key: value if key == "step" else jnp.take(value, index, axis=0)
                   for key, value in state.items() if key != "cache"}
        smaller["cache"] = {**cache, "k": jnp.take(cache["k"], index, axis=1),
                            "v": jnp.take(cache["v"], index, axis=1), "mask": jnp.take(cache["mask"], index, axis=0)}
        return smaller, np.concatenate([where[active], np.full(size - len(active), -1)])

    def _find_stop(self, ids: np.ndarray, stop: tuple[str, ...]) -> tuple[int, str] | None:
        """``(tokens kept, text before the stop string)`` for the earliest stop string, or None."""
        ids = ids.tolist()
        if ids and ids[-1] in self.stop_ids:
            ids = ids[:-1]  # a stop token is not text
        text = self.tokenizer.decode(ids)
        found = [(text.find(s), s) for s in stop if s in text]
        if not found:
            return None
        at, _ = min(found)
        lo, hi = 1, len(ids)  # smallest prefix whose text already reaches past the stop string
        while lo < hi:
            mid = (lo + hi) // 2
            prefix = self.tokenizer.decode(ids[:mid])
            if any(s in prefix for s in stop):
                hi = mid
            else:
                lo = mid + 1
        return lo, text[:at]
