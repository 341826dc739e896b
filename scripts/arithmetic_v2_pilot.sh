#!/usr/bin/env bash
# The arithmetic-v2 pilot as pre-registered in results/arithmetic-v2/PROTOCOL.md: identity vs coma,
# seeds 101-104, for each seed the B=2 block then the B=4 block (training.train_batch_size), each
# block's arms in the order its seed draws. Re-running skips finished runs and resumes a killed one;
# after every run the results so far are exported to results/arithmetic-v2/pilot/b<B>/ (commit them).
#   bash scripts/arithmetic_v2_pilot.sh            # all seeds
#   SEEDS="101" bash scripts/arithmetic_v2_pilot.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for seed in ${SEEDS:-101 102 103 104}; do
  for b in 2 4; do
    .venv/bin/python launch/sweep.py --sweep-dir "runs/arithmetic-v2-pilot/b$b" --quiet \
      --configs configs/arithmetic/identity.py configs/arithmetic/coma.py --seeds "$seed" \
      --set "training.train_batch_size=$b" \
      --export "results/arithmetic-v2/pilot/b$b" --endpoint final_debate_accuracy
  done
done
