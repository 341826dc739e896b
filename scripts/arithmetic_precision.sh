#!/usr/bin/env bash
# The precision pilot as pre-registered in results/arithmetic-precision/PROTOCOL.md: the arithmetic family's
# identity run in float32 against a bf16 sampler/learner pair, seeds 2000-2007, one seed block after another.
# Re-running skips finished runs (here or committed under results/) and resumes a killed one from its checkpoint;
# after every run the results so far are exported to results/arithmetic-precision/ (commit them).
#   bash scripts/arithmetic_precision.sh                  # all 8 blocks
#   SEEDS="2000 2001" bash scripts/arithmetic_precision.sh
#   DEADLINE=+90 bash scripts/arithmetic_precision.sh     # begin no block that would not end within 90 minutes
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/committed_runs.sh
sweep=runs/arithmetic-precision
results=results/arithmetic-precision
# runs committed by earlier sessions: copy them in, so that the sweep skips them and the export keeps them
copy_committed_runs "$results" "$sweep"
.venv/bin/python launch/sweep.py --sweep-dir "$sweep" --quiet \
  --configs configs/arithmetic/precision/fp32.py configs/arithmetic/precision/bf16_pair.py \
  --seeds ${SEEDS:-2000 2001 2002 2003 2004 2005 2006 2007} \
  --export "$results" --keep-checkpoints last ${DEADLINE:+--deadline "$DEADLINE"}
