"""Preference training (DPO, RPO or SFT, ``dpo.objective``) of a LoRA adapter: the jitted update
(pure) and the epoch loop (thin stateful shell).

The base parameters stay frozen; only the adapter and its optimiser state change. The reference policy
is the base model without adapter, so its sequence log-probs are computed once before training.
Each update accumulates gradients over ``grad_accumulation`` micro-batches of ``batch_size`` pairs
inside one compiled ``lax.scan``; gradients are normalised by the number of real pairs in the update.
With held-out pairs or a held-out evaluation every epoch (and the base, as epoch 0) is validated
(:mod:`jaxdebate.coherence.validation`, ``train/epochs.jsonl``); ``dpo.early_stopping`` stops after
``dpo.patience`` epochs without a better held-out accuracy and exports the best epoch's adapter.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxdebate import jsonl
from jaxdebate.checkpointer import Checkpointer
from jaxdebate.coherence import batching, validation
from jaxdebate.coherence.config import CoherenceConfig, DPOConfig
from jaxdebate.coherence.dpo import objective_loss, sequence_logprobs
from jaxdebate.configlib import to_dict
from jaxdebate.data.stream import epoch_order
from jaxdebate.errors import ConfigError, DataError
from jaxdebate.metrics import METRICS_FILE, MetricWriter, read_metrics
from jaxdebate.model import lora, peft_export, token_logprobs
from jaxdebate.rl.optim import AdamWBound, guarded_apply, nonfinite_update
from jaxdebate.schedules import warmup_then_decay


def make_schedule(cfg: DPOConfig, total_steps: int) -> optax.Schedule:
    """Learning rate per update: linear warm-up over ``warmup_ratio`` of the updates, then constant,
    linear decay to 0, or cosine decay to 0."""
    warmup = int(round(cfg.warmup_ratio * total_steps))
    return warmup_then_decay(cfg.learning_rate, 0.0, warmup, total_steps, cfg.schedule)


def dpo_bound(cfg: DPOConfig) -> AdamWBound:
    """The constants of :func:`dpo_optimizer` (Adam's default betas), per unit learning rate."""
    return AdamWBound(b1=0.9, b2=0.999, weight_decay=cfg.weight_decay)


def dpo_optimizer(cfg: DPOConfig) -> optax.GradientTransformation:
    """AdamW's direction (Adam moments + decoupled weight decay), negated: the update multiplies it by
    the learning rate of the step (so one compiled update serves every schedule) and clips the
    gradient to ``max_grad_norm`` first (:func:`jaxdebate.rl.optim.guarded_apply`)."""
    b = dpo_bound(cfg)
    return optax.chain(optax.scale_by_adam(b1=b.b1, b2=b.b2), optax.add_decayed_weights(b.weight_decay),
                       optax.scale(-1.0))


def policy_logps(params: Any, model_config: Any, tokens, mask, completion_mask, chunk_size: int = 1024) -> jax.Array:
    """Sequence log-probs ``[N]`` of the completion part of ``tokens [N, T]``."""
    lp = token_logprobs(params, model_config, tokens, mask, chunk_size=chunk_size)
    return sequence_logprobs(lp, completion_mask)


@functools.lru_cache(maxsize=8)
def make_ref_fn(model_config: Any, chunk_size: int = 1024) -> Callable:
    """Jitted sequence log-probs of the base (reference) model (cached: one compile per config)."""
    return jax.jit(lambda params, tokens, mask, cmask: policy_logps(params, model_config, tokens, mask, cmask, chunk_size))


@functools.lru_cache(maxsize=8)
def make_update_fn(model_config: Any, lora_scale: float, beta: float, max_grad_norm: float, weight_decay: float,
                   chunk_size: int = 1024, objective: str = "dpo", rpo_alpha: float = 1.0):
    """``update(adapter, opt_state, base, batch, lr) -> (adapter, opt_state, metrics)``, jitted (and
    cached, so repeated runs in one process compile once).

    ``batch`` holds ``tokens/mask/completion_mask [K, 2B, T]``, ``weights [K, B]`` and the reference
    log-probs ``ref_chosen/ref_rejected [K, B]``.
    """
    dpo_cfg = DPOConfig(max_grad_norm=max_grad_norm, weight_decay=weight_decay)
    optimizer, bound = dpo_optimizer(dpo_cfg), dpo_bound(dpo_cfg)

    def micro(adapter, base, mb):
        merged = lora.merge(base, adapter, lora_scale)
        seq = policy_logps(merged, model_config, mb["tokens"], mb["mask"], mb["completion_mask"], chunk_size)
        b = mb["weights"].shape[0]
        n_chosen = jnp.sum(mb["completion_mask"][:b], axis=-1)
        _, metrics = objective_loss(seq[:b], seq[b:], mb["ref_chosen"], mb["ref_rejected"], n_chosen,
                                    objective=objective, beta=beta, rpo_alpha=rpo_alpha, weights=mb["weights"])
        count = jnp.sum(mb["weights"])
        sums = {k: v * count for k, v in metrics.items()}  # per-micro means -> sums over real pairs
        return sums["loss"], sums

    grad_fn = jax.value_and_grad(micro, has_aux=True)

    def update(adapter, opt_state, base, batch, lr):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, adapter)
        _, metric_shape = jax.eval_shape(micro, adapter, base, jax.tree_util.tree_map(lambda x: x[0], batch))
        init = (zeros, jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shape))

        def body(acc, mb):
            (_, sums), grads = grad_fn(adapter, base, mb)
            return jax.tree_util.tree_map(jnp.add, acc, (grads, sums)), None

        (grad_sum, metric_sum), _ = jax.lax.scan(body, init, batch)
        count = jnp.maximum(jnp.sum(batch["weights"]), 1.0)
        grads = jax.tree_util.tree_map(lambda g: g / count, grad_sum)
        metrics = {k: v / count for k, v in metric_sum.items()}
        # the GRPO learner's apply: clip, AdamW, and a non-finite update never applied
        adapter, opt_state, applied = guarded_apply(optimizer, adapter, opt_state, grads, metrics["loss"],
                                                    grad_clip=max_grad_norm, scale=lr, bound=bound)
        return adapter, opt_state, {**metrics, **applied}

    return jax.jit(update, donate_argnums=(0, 1))


def reference_logps(
    ref_fn: Callable, base: Any, encoded: Sequence[batching.PairTokens], cfg: DPOConfig, pad_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Reference sequence log-probs of every encoded pair's chosen and rejected completion."""
    n = len(encoded)
    chosen, rejected = np.zeros(n, np.float32), np.zeros(n, np.float32)
    for idx in batching.updates(range(n), cfg.batch_size):
        arr = batching.make_update(
            encoded, idx, batch_size=cfg.batch_size, grad_accumulation=1,
            length_bucket=cfg.length_bucket, max_length=cfg.max_length, pad_id=pad_id,
        )
        seq = np.asarray(ref_fn(base, arr["tokens"][0], arr["mask"][0], arr["completion_mask"][0]))
        chosen[idx] = seq[: len(idx)]
        rejected[idx] = seq[cfg.batch_size: cfg.batch_size + len(idx)]
    return chosen, rejected


_LATER_DEFAULTS = {"objective": "dpo", "rpo_alpha": 1.0, "early_stopping": False, "patience": 1}
_LATER_MODEL_DEFAULTS = {"dot_dtype": "compute"}


def _set_only(section: Mapping[str, Any], later_defaults: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if not (k in later_defaults and v == later_defaults[k])}


def run_fingerprint(cfg: CoherenceConfig, pairs: Sequence[Mapping[str, Any]]) -> str:
    """A hash of what determines the trained adapter except the epoch count (pairs, model, LoRA and the
    DPO settings), so a resumed run refuses checkpoints of a different run; raising ``dpo.epochs`` and
    resuming continues the same run."""
    # fields added after the first runs count only when set, so those runs' checkpoints still resume
    settings = {k: v for k, v in _set_only(to_dict(cfg.dpo), _LATER_DEFAULTS).items() if k != "epochs"}
    blob = json.dumps(
        [_set_only(to_dict(cfg.model), _LATER_MODEL_DEFAULTS), to_dict(cfg.lora), settings, *([cfg.protocol] if cfg.protocol != "seed" else []),
         [(p["question"], p["chosen"], p["rejected"], p.get("chosen_finish_reason"), p.get("rejected_finish_reason"))
          for p in pairs]],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclasses.dataclass
class TrainResult:
    """What training produced: the exported adapter (the best epoch's under early stopping, else the
    last), per-update metrics, the per-epoch log and where the PEFT adapter was written."""

    adapter: lora.Adapter
    history: list[dict[str, float]]
    adapter_dir: Path | None
    summary: dict[str, Any]
    epochs: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def _copy(tree: Any) -> Any:
    """A host copy that the next update's buffer donation cannot overwrite."""
    return jax.tree_util.tree_map(lambda x: np.array(x, copy=True), tree)


EpochEval = Callable[[Any, int], Mapping[str, Any]]  # (merged params, epoch) -> heldout/... figures


def train(
    cfg: CoherenceConfig,
    pairs: Sequence[Mapping[str, Any]],
    base: Any,
    model_config: Any,
    tokenizer: Any,
    workdir: str | Path,
    *,
    progress: bool = True,
    checkpoints: bool = True,
    heldout_pairs: Sequence[Mapping[str, Any]] = (),
    epoch_eval: EpochEval | None = None,
) -> TrainResult:
    """Train a LoRA adapter on ``pairs`` with ``dpo.objective``; validate every epoch on
    ``heldout_pairs`` and with ``epoch_eval`` (the held-out greedy accuracy) when given; checkpoint
    after every epoch (resuming from the latest one under ``workdir/train/checkpoints``), log metrics,
    and export the adapter in the PEFT format to ``workdir/adapter``."""
    from tqdm.auto import tqdm

    workdir = Path(workdir)
    d = cfg.dpo
    if d.early_stopping and epoch_eval is None:
        raise ConfigError("dpo.early_stopping needs the held-out greedy evaluation: set pairs.heldout_fraction > 0 "
                          "and rerun the pairs stage")
    encoded = batching.encode_pairs(pairs, tokenizer, d.max_length, cfg.answer_format)
    if not encoded.pairs:
        raise DataError(f"no trainable pairs: {len(pairs)} pairs given, {encoded.n_dropped} dropped as too long")
    held = batching.encode_pairs(heldout_pairs, tokenizer, d.max_length, cfg.answer_format).pairs if heldout_pairs else ()
    n = len(encoded.pairs)
    per_update = d.batch_size * d.grad_accumulation
    steps_per_epoch = math.ceil(n / per_update)
    total = steps_per_epoch * d.epochs
    optimizer = dpo_optimizer(d)
    schedule = make_schedule(d, total)

    started = time.perf_counter()
    chunk = cfg.model.logprob_chunk
    ref_fn = make_ref_fn(model_config, chunk)

    def validate(adapter: Any, epoch: int) -> dict[str, Any]:
        merged = lora.merge(base, adapter, cfg.lora.scale)
        row: dict[str, Any] = {}
        if held:
            pc, pr = reference_logps(ref_fn, merged, held, d, tokenizer.pad_id)
            row.update(validation.pair_metrics(pc, pr, *held_ref, np.array([len(p.chosen) for p in held]), d))
        if epoch_eval is not None:
            row.update(epoch_eval(merged, epoch))
        return row

    validating = bool(held) or epoch_eval is not None
    adapter = lora.init(base, cfg.lora, jax.random.PRNGKey(d.seed))
    opt_state = optimizer.init(adapter)
    first_epoch, epochs, stopped = 0, [], False
    fingerprint = run_fingerprint(cfg, pairs)
    ckpt = Checkpointer(workdir / "train" / "checkpoints", keep_last=d.epochs) if checkpoints else None
    if ckpt is not None and ckpt.latest_step() is not None:
        meta = ckpt.metadata()
        if meta.get("fingerprint") != fingerprint:
            raise ConfigError(
                f"{ckpt.directory} holds a DPO run with other pairs or model/lora/dpo settings; "
                "delete that directory (or use another --workdir) to train from scratch"
            )
        state, meta = ckpt.restore(target={"adapter": adapter, "opt_state": opt_state})
        adapter, opt_state = state["adapter"], state["opt_state"]
        first_epoch, epochs, stopped = int(meta["epoch"]), list(meta.get("epochs", [])), bool(meta.get("stopped"))
    # the frozen base's log-probs, which every update and validation compares with (none are needed
    # when a relaunch finds the run finished)
    ref_chosen = ref_rejected = held_ref = None
    if first_epoch < d.epochs and not stopped:
        ref_chosen, ref_rejected = reference_logps(ref_fn, base, encoded.pairs, d, tokenizer.pad_id)
        held_ref = reference_logps(ref_fn, base, held, d, tokenizer.pad_id) if held else None
    ref_seconds = time.perf_counter() - started
    best = validation.best_epoch(epochs) if d.early_stopping else None
    if best is not None and best != first_epoch:  # the best adapter of an early-stopped run is an older checkpoint
        kept = ckpt.restore(best, target={"adapter": adapter, "opt_state": opt_state})[0]["adapter"]
        best_adapter = _copy(kept)
    else:
        best_adapter = _copy(adapter)
    if validating and first_epoch == 0:  # the base model, before the first update
        epochs = [{"epoch": 0, **validate(adapter, 0)}]
    update = make_update_fn(model_config, cfg.lora.scale, d.beta, d.max_grad_norm, d.weight_decay, chunk,
                            d.objective, d.rpo_alpha)
    log = cfg.logging
    writer = MetricWriter(
        workdir / "train", tensorboard=log.tensorboard, wandb_project=log.wandb_project if log.wandb else None,
        wandb_mode=log.wandb_mode, wandb_entity=log.wandb_entity, run_name=log.run_name,
        truncate_after=first_epoch * steps_per_epoch,
    )

    history: list[dict[str, float]] = []
    step = first_epoch * steps_per_epoch
    bar = tqdm(total=total, initial=step, desc=d.objective, disable=not progress, dynamic_ncols=True)
    try:
        for epoch in range(first_epoch, d.epochs):
            if stopped:
                break
            for idx in batching.updates(epoch_order(n, d.seed, epoch), per_update):
                arr = batching.make_update(
                    encoded.pairs, idx, batch_size=d.batch_size, grad_accumulation=d.grad_accumulation,
                    length_bucket=d.length_bucket, max_length=d.max_length, pad_id=tokenizer.pad_id,
                )
                batch = {k: arr[k] for k in ("tokens", "mask", "completion_mask", "weights")}
                batch["ref_chosen"] = ref_chosen[arr["index"]]
                batch["ref_rejected"] = ref_rejected[arr["index"]]
                t0 = time.perf_counter()
                lr = float(schedule(step))
                adapter, opt_state, metrics = update(adapter, opt_state, base, batch, np.float32(lr))
                metrics = {k: float(v) for k, v in metrics.items()}
                bad = nonfinite_update(metrics)
                if bad:  # the adapter and optimiser state were kept as they were
                    bar.write(f"dpo update {step + 1}: non-finite {bad}; update skipped")
                metrics.update(
                    epoch=epoch + 1, lr=lr, pairs=len(idx),
                    seconds=time.perf_counter() - t0, tokens=int(arr["mask"].sum()),
                )
                step += 1
                history.append({"step": step, **metrics})
                writer.write(step, metrics)
                bar.update(1)
                bar.set_postfix(loss=f"{metrics['loss']:.4f}", margin=f"{metrics['rewards/margin']:.3f}",
                                gnorm=f"{metrics['grad_norm']:.3g}")
            epochs.append({"epoch": epoch + 1, "step": step, **validation.epoch_means(history, epoch + 1),
                           **(validate(adapter, epoch + 1) if validating else {})})
            if not d.early_stopping or validation.best_epoch(epochs) == epoch + 1:
                best_adapter = _copy(adapter)
            stopped = d.early_stopping and validation.should_stop(epochs, d.patience)
            if ckpt is not None:
                ckpt.save(epoch + 1, {"adapter": adapter, "opt_state": opt_state},
                          metadata={"epoch": epoch + 1, "step": step, "fingerprint": fingerprint, "epochs": epochs,
                                    "stopped": stopped})
            jsonl.write_records(workdir / "train" / "epochs.jsonl", epochs)
    finally:
        bar.close()
        writer.close()
        if ckpt is not None:
            ckpt.close()

    if epochs:
        jsonl.write_records(workdir / "train" / "epochs.jsonl", epochs)
    adapter_dir = peft_export.save(workdir / "adapter", best_adapter, cfg.lora, base_model=cfg.model.source)
    # every update of the run, earlier processes' too (a resumed run's history holds only its own)
    logged = read_metrics(workdir / "train") if (workdir / "train" / METRICS_FILE).is_file() else history
    logged = [{k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in r.items()}  # the file's spelling
              for r in logged if "epoch" in r and "loss" in r]
    summary = _summary(logged, encoded, len(pairs), steps_per_epoch, d.epochs, time.perf_counter() - started, ref_seconds)
    trained = [int(r["epoch"]) for r in epochs if int(r["epoch"]) >= 1]
    summary.update(
        objective=d.objective, seed=d.seed, heldout_pairs=len(held), epochs_run=max(trained, default=first_epoch),
        stopped_early=stopped, best_epoch=validation.best_epoch(epochs),
        exported_epoch=validation.best_epoch(epochs) if d.early_stopping else max(trained, default=first_epoch),
        epochs_log=epochs,
    )
    # the base (epoch 0) is never exported, so say when it beat the epoch that was
    by_epoch = {int(r["epoch"]): r.get(validation.STOP_KEY) for r in epochs}
    base_acc, exported_acc = by_epoch.get(0), by_epoch.get(summary["exported_epoch"])
    summary["base_beats_exported"] = (None if base_acc is None or exported_acc is None
                                      else bool(base_acc > exported_acc))
    (workdir / "train" / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return TrainResult(best_adapter, history, adapter_dir, summary, epochs)


def _summary(history, encoded, n_given, steps_per_epoch, epochs, seconds, ref_seconds) -> dict[str, Any]:
    by_epoch: dict[int, list[dict[str, float]]] = {}
    for h in history:
        by_epoch.setdefault(int(h["epoch"]), []).append(h)
    keys = [k for k in validation.TRAIN_KEYS if history and k in history[0]]
    return {
        "pairs_given": n_given,
        "pairs_trained": len(encoded.pairs),
        "pairs_dropped_too_long": encoded.n_dropped,
        "completions_truncated": encoded.n_truncated,
        "updates_per_epoch": steps_per_epoch,
        "epochs": epochs,
        "updates_run": len(history),
        "updates_skipped_nonfinite": sum(1 for h in history if nonfinite_update(h)),
        "seconds": seconds,  # this process's
        "update_seconds": float(sum(h.get("seconds", 0.0) for h in history)),  # every update's, all processes
        "reference_seconds": ref_seconds,
        "by_epoch": {
            e: {k: float(np.mean([h[k] for h in hs])) for k in keys} for e, hs in sorted(by_epoch.items())
        },
    }
