"""Which validations a run makes at a step, their per-item rows on disk, and the reuse of step 0.

A run validates its held-out items in one or several environments (``data.validation_envs``; by
default as routed by ``data.validation_env`` / ``data.env_name_remap``) and, at its first and last
validation, the ``data.transfer`` set. Every validation writes ``WORKDIR/validation/step_<N>.jsonl``
(one row per item and environment: :func:`jaxdebate.rl.validation.item_rows`; the files:
:mod:`jaxdebate.validation_files`).

Step 0 validates the base model, which is the same computation in every run of a sweep that shares
the model, the items, the debate protocol, the sampling settings, the code and what else decides its
bits (:func:`sampler_identity`: the CPU's vector flags, jax's version, ``XLA_FLAGS``): its metrics and
rows are cached under ``$JAXDEBATE_CACHE/validation/<key>.json`` and reused (``val/cached`` = 1).
Within a step, a greedy request the step's sets repeat is decoded once (:mod:`jaxdebate.sampling.memo`;
``val/reused_completions`` counts the completions answered from memory).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxdebate import validation_files
from jaxdebate.configlib import to_dict
from jaxdebate.data import Item
from jaxdebate.rl.validation import item_rows, validate
from jaxdebate.sampling.base import SamplingParams
from jaxdebate.sampling.hardware import simd_flags
from jaxdebate.sampling.memo import memoize_greedy

_SOURCE = Path(__file__).resolve().parents[1]  # the jaxdebate package: its code is part of the key


@dataclasses.dataclass(frozen=True)
class ValidationSet:
    """Items played in one environment (``env=None``: routed by ``remap``), logged under ``prefix``."""

    set_name: str  # "heldout" | "transfer"
    mode: str  # the validation_envs name, "transfer", or "default"
    prefix: str  # metric prefix, e.g. "val/debate/"
    items: tuple[Item, ...]
    env: str | None
    remap: Any = None


def plan(data, val_items: Sequence[Item], transfer_items: Sequence[Item], *, with_transfer: bool) -> list[ValidationSet]:
    """The validations of one step (``data`` is the config's data section)."""
    out = []
    if val_items and data.validation_envs:
        out += [ValidationSet("heldout", name, f"val/{name}/", tuple(val_items), env)
                for name, env in data.validation_envs.items()]
    elif val_items:
        out.append(ValidationSet("heldout", "default", "val/", tuple(val_items), data.validation_env,
                                 None if data.validation_env else data.env_name_remap))
    if with_transfer and transfer_items:
        out.append(ValidationSet("transfer", "transfer", "val/transfer/", tuple(transfer_items), data.transfer_env))
    return out


def _code_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(_SOURCE.rglob("*.py")):
        digest.update(path.relative_to(_SOURCE).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def sampler_identity(sampler: Any, environ: Mapping[str, str] = os.environ, flags: Sequence[str] | None = None) -> str:
    """What decodes step 0 beyond the config: the sampler's class, the CPU's vector instructions (XLA's
    fp32 reductions differ between AVX2 and AVX-512), the jax/jaxlib versions and ``XLA_FLAGS`` (an
    option such as a fusion type moves the last bits, and greedy answers with them); ``environ`` and
    ``flags`` default to this process's and this CPU's."""
    import jax
    import jaxlib

    return json.dumps([type(sampler).__name__, simd_flags(flags), jax.__version__, jaxlib.__version__,
                       environ.get("XLA_FLAGS", "").split()])


def initial_key(config, sets: Sequence[ValidationSet], identity: str) -> str:
    """What step 0's validation depends on: model, items, debate protocol, sampling, backend, code, and
    the training seed only where it can matter (sampled validation, or a seeded LoRA init): greedy
    decoding of the base weights is the same for every seed, so a sweep computes it once, not once per
    seed block (the pilot's 8 step-0 row files, 4 seeds, were byte-identical)."""
    seeded = config.sampler.eval_temperature > 0 or config.model.lora.rank > 0
    payload = {
        # model.dot_dtype is the learner's alone (the samplers reset it)
        "model": {k: v for k, v in to_dict(config.model).items() if k != "dot_dtype"}, "debate": to_dict(config.debate),
        "sampler": {k: v for k, v in to_dict(config.sampler).items() if k not in ("fallback",)},
        "eval_batch_size": config.training.eval_batch_size, "seed": config.training.seed if seeded else None,
        "sets": [[s.prefix, s.env, dict(s.remap or {}), [[i.id, i.problem, i.answer, i.env] for i in s.items]]
                 for s in sets],
        "sampler_identity": identity, "code": _code_digest(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


def cache_path(key: str) -> Path:
    from jaxdebate.model.sources import cache_dir

    return cache_dir() / "validation" / f"{key}.json"


def load_cached(key: str) -> tuple[dict[str, float], list[dict[str, Any]]] | None:
    try:
        entry = json.loads(cache_path(key).read_text())
        return entry["metrics"], entry["rows"]
    except (OSError, ValueError, KeyError):
        return None


def store(key: str, metrics: dict[str, float], rows: Sequence[dict[str, Any]]) -> None:
    path = cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"metrics": metrics, "rows": list(rows)}))
    os.replace(tmp, path)


def run(step: int, config, sampler, tokenizer, grader, val_items: Sequence[Item], transfer_items: Sequence[Item],
        *, sampling: SamplingParams, workdir: Path) -> dict[str, float]:
    """Validate every set of ``step`` (the transfer set at step 0 and the last step), write the rows,
    and reuse or fill the step-0 cache; the metrics, prefixed per set ({} when nothing to validate)."""
    ends = step in (0, config.training.total_train_steps)
    sets = plan(config.data, val_items, transfer_items, with_transfer=ends)
    if not sets:
        return {}
    key = None
    if step == 0 and config.training.reuse_initial_validation:
        key = initial_key(config, sets, sampler_identity(sampler))
        cached = load_cached(key)
        if cached is not None:
            validation_files.write(workdir, step, cached[1])
            return {**cached[0], "val/cached": 1.0}
    metrics: dict[str, float] = {}
    rows: list[dict[str, Any]] = []
    # greedy validation repeats itself (the debate's first round is the single-agent prompt): one memo
    # for the step's sets decodes each greedy request once
    with memoize_greedy(sampler) as memo:
        for vset in sets:
            items = [it.with_env(vset.env) for it in vset.items] if vset.env else list(vset.items)
            found, batches = validate(memo, tokenizer, items, debate=config.debate, sampling=sampling,
                                      grader=grader, env_name_remap=vset.remap,
                                      batch_size=config.training.eval_batch_size, seed=config.training.seed + 7919)
            metrics.update({f"{vset.prefix}{k}": v for k, v in found.items()})
            rows += item_rows(batches, set_name=vset.set_name, mode=vset.mode)
        metrics["val/reused_completions"] = float(memo.hits)
    validation_files.write(workdir, step, rows)
    if key is not None:
        store(key, metrics, rows)
    return metrics


def run_offline(config, sampler, tokenizer, grader, val_items: Sequence[Item],
                workdir: Path) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """One validation pass outside a run (noise floor, benches), decoded as the trainer validates: at a
    step that is neither 0 nor the last (no step-0 cache, no transfer set); the metrics and the rows."""
    step = config.training.total_train_steps + 1
    metrics = run(step, config, sampler, tokenizer, grader, val_items, [],
                  sampling=config.sampler.sampling_params(evaluation=True), workdir=workdir)
    return metrics, validation_files.read(validation_files.step_path(workdir, step))
