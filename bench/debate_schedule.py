"""Benchmark: a main-job debate step on the vLLM server, barrier-free vs round by round (issue 12 item 2).

The same step's debates are played twice on one vLLM server (the main job's settings: ``--config``,
default configs/coma.py, the items of its first training step, the same seeds, the prefix cache reset
before each play as the trainer's weight sync resets it):

- ``streaming``: what the trainer does, each request submitted as soon as it is runnable, so a
  rollout's round 2 starts when its own agents have answered;
- ``rounds``: the sampler seen only through ``generate`` (one call per wave of runnable requests, the
  scheduling before issue 12): round 2 waits for the slowest round-1 answer of the whole batch.

Printed per mode: sampling seconds, completion tokens, tokens/s, the server's mean running requests
(its ``vllm:num_requests_running`` gauge, polled every 0.25 s) and the client's mean sequences in
flight (the trainer's ``sampler/concurrency``; in ``rounds`` mode it counts a wave's sequences until
the whole call returns, so there it overstates), then ``sampled tokens/s streaming/rounds: X``.

    .venv/bin/python bench/debate_schedule.py                          # configs/coma.py, step 1
    .venv/bin/python bench/debate_schedule.py --set sampler.max_new_tokens=256 --repeats 4
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class RunningRequests:
    """Polls the server's ``vllm:num_requests_running`` gauge (``GET /metrics``) in a thread: the
    server-side concurrency, which the client-side count cannot see inside one ``generate`` call."""

    def __init__(self, server, period: float = 0.25) -> None:
        self._server, self._period = server, period
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(self._period):
            text = self._server.request("/metrics", method="GET", parse=False, timeout=5.0)
            running = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("vllm:num_requests_running")]
            if running:
                self._samples.append(sum(running))

    def __enter__(self) -> RunningRequests:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return sum(self._samples) / max(len(self._samples), 1)


class RoundByRound:
    """A sampler seen only through ``generate``: the debate protocol then calls it once per wave."""

    def __init__(self, sampler) -> None:
        self._sampler = sampler

    def generate(self, prompts, params):
        return self._sampler.generate(prompts, params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/coma.py")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides, section.field=value")
    parser.add_argument("--repeats", type=int, default=2,
                        help="plays per mode; the order alternates, each play has its own seed and a cold prefix cache")
    args = parser.parse_args()

    from jaxdebate.configlib import load_config
    from jaxdebate.config import Config
    from jaxdebate.data import ItemStream
    from jaxdebate.debate import Grader, run_debates
    from jaxdebate.model import load, load_tokenizer
    from jaxdebate.sampling.base import SamplingParams
    from jaxdebate.sampling.factory import make_sampler

    cfg = load_config(ROOT / args.config, ["sampler.backend=vllm", "sampler.fallback=error", *args.set],
                      expected=Config)
    tokenizer = load_tokenizer(cfg.model.source)
    train_items, _ = cfg.data.load()
    items = ItemStream(train_items, cfg.training.train_batch_size, cfg.training.seed).next_batch()
    params, model_config = load(cfg.model.source, dtype=cfg.model.dtype)
    s = cfg.sampler
    sampling = SamplingParams(max_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p)
    grader = Grader()
    results: dict[str, list[dict]] = {"streaming": [], "rounds": []}
    with tempfile.TemporaryDirectory(prefix="bench-schedule-") as workdir:
        sampler = make_sampler(s, params, model_config, tokenizer, workdir=workdir,
                               max_total_len=cfg.debate.max_sequence_length, seed=cfg.training.seed)

        def play(target, seed: int):
            return run_debates(target, tokenizer, items, config=cfg.debate,
                               n_rollouts=cfg.training.generations_per_prompt, sampling=sampling, grader=grader,
                               env_name_remap=cfg.data.env_name_remap, seed=seed)

        try:
            play(sampler, cfg.training.seed + 1000)  # untimed: a fresh CPU server is slow on its first shapes
            for repeat in range(args.repeats):
                for mode in ("streaming", "rounds")[::1 if repeat % 2 == 0 else -1]:
                    target = sampler if mode == "streaming" else RoundByRound(sampler)
                    sampler.server.request("/reset_prefix_cache")  # as after the trainer's weight sync
                    t0 = time.perf_counter()
                    with RunningRequests(sampler.server) as running:
                        batch = play(target, cfg.training.seed + repeat)
                    wall = time.perf_counter() - t0
                    tokens = sum(len(t.completion_ids) for t in batch.turns)
                    row = {"wall_s": wall, "sampling_s": batch.stats["sampling_seconds"], "tokens": tokens,
                           "in_flight": batch.stats["mean_in_flight"], "running": running.mean,
                           "calls": batch.stats["sampler_calls"], "turns": len(batch.turns),
                           "token_ids": {t.index: t.completion_ids for t in batch.turns}}
                    results[mode].append(row)
                    print(f"{mode:<10} play {repeat + 1}: sampling {row['sampling_s']:6.1f} s, {tokens:6d} tokens, "
                          f"{tokens / row['sampling_s']:6.1f} tokens/s, server running {row['running']:5.1f} requests "
                          f"(mean), client in flight {row['in_flight']:5.1f}, {row['calls']} sampler calls, "
                          f"{row['turns']} turns", flush=True)
        finally:
            sampler.close()
            grader.close()
    rate = {m: sum(r["tokens"] for r in rows) / sum(r["sampling_s"] for r in rows) for m, rows in results.items()}
    same = [a["token_ids"] == b["token_ids"] for a, b in zip(results["streaming"], results["rounds"])]
    print(f"identical turns in both modes: {sum(same)} of {len(same)} plays (bf16 batching may differ)")
    running = {m: sum(r["running"] for r in rows) / len(rows) for m, rows in results.items()}
    print(f"server running requests (mean) streaming {running['streaming']:.1f}, rounds {running['rounds']:.1f}")
    print(f"sampled tokens/s streaming/rounds: {rate['streaming'] / rate['rounds']:.2f}")


if __name__ == "__main__":
    main()
