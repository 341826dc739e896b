#!/usr/bin/env bash
# The arithmetic-v2 main sweep as pre-registered in results/arithmetic-v2/PROTOCOL.md: N seed blocks
# (seeds 1000, 1001, ...), each running the five arms of configs/arithmetic/ in the order its seed
# draws, at B prompts per step (training.train_batch_size). B and N are the pilot's decision (the
# PROTOCOL's "Decided by the pilot" section); there are no defaults, so that nothing runs undecided.
# Runs committed under results/arithmetic-v2/runs/ (another session, maybe another machine) seed the
# sweep directory, so they are skipped; after every run the results so far are exported to
# results/arithmetic-v2/ (commit them). No block is begun that would not end before DEADLINE
# (`launch/sweep.py --deadline`, default +170 minutes), so every block runs on one machine. A finished
# run's orbax checkpoints (~3 GB) are deleted (--keep-checkpoints none): 295 runs could not keep them,
# and the analysis reads the metrics and per-item validation rows, which stay.
#   B=2 N=9 bash scripts/arithmetic_v2_main.sh
#   B=2 N=9 DEADLINE=2026-11-26T03:00 bash scripts/arithmetic_v2_main.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/committed_runs.sh
: "${B:?set B, the prompts per step decided by the pilot (PROTOCOL.md)}"
: "${N:?set N, the seed blocks decided by the pilot (PROTOCOL.md)}"
sweep=runs/arithmetic-v2
results=results/arithmetic-v2
copy_committed_runs "$results" "$sweep"
seeds=$(seq 1000 $((1000 + N - 1)))
# the sampler as registered: the in-process JAX sampler (configs/arithmetic/ samples through the vLLM server
# in float32 since 2026-12-06, which draws other samples); a finished run that ran another config is refused
# shellcheck disable=SC2086
.venv/bin/python launch/sweep.py --sweep-dir "$sweep" --quiet --configs configs/arithmetic --seeds $seeds \
  --set "training.train_batch_size=$B" sampler.backend=jax sampler.vllm.dtype=auto --deadline "${DEADLINE:-+170}" \
  --export "$results" --endpoint final_debate_accuracy --keep-checkpoints none
