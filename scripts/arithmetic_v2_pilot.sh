#!/usr/bin/env bash
# The arithmetic-v2 pilot as pre-registered in results/arithmetic-v2/PROTOCOL.md: identity vs coma,
# seeds 101-104, for each seed the B=2 block then the B=4 block (training.train_batch_size), each
# block's arms in the order its seed draws. Re-running skips finished runs (here or committed under
# results/) and resumes a killed one from its checkpoint on this machine;
# after every run the results so far are exported to results/arithmetic-v2/pilot/b<B>/ (commit them).
#   bash scripts/arithmetic_v2_pilot.sh            # all seeds
#   SEEDS="101" bash scripts/arithmetic_v2_pilot.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/committed_runs.sh
for seed in ${SEEDS:-101 102 103 104}; do
  for b in 2 4; do
    # the runs committed by earlier sessions (another machine): seed the sweep directory with them, so
    # the sweep skips them (their run.json says done) and the export keeps them in the summary
    copy_committed_runs "results/arithmetic-v2/pilot/b$b" "runs/arithmetic-v2-pilot/b$b"
    # the sampler as registered: the in-process JAX sampler (configs/arithmetic/ uses the vLLM server since 2026-12-06)
    .venv/bin/python launch/sweep.py --sweep-dir "runs/arithmetic-v2-pilot/b$b" --quiet \
      --configs configs/arithmetic/identity.py configs/arithmetic/coma.py --seeds "$seed" \
      --set "training.train_batch_size=$b" sampler.backend=jax sampler.vllm.dtype=auto \
      --export "results/arithmetic-v2/pilot/b$b" --endpoint final_debate_accuracy
  done
done
