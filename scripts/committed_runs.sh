# Sourced by the study runners (scripts/arithmetic_*.sh): copy_committed_runs RESULTS SWEEP copies the runs an
# earlier session committed under RESULTS/runs/ into the sweep directory SWEEP (those not there yet), so that
# launch/sweep.py skips them (their run.json says done) and its --export keeps them in the summary.
copy_committed_runs() {
  local results=$1 sweep=$2 run
  [ -d "$results/runs" ] || return 0
  mkdir -p "$sweep"
  for run in "$results"/runs/*/; do
    [ -e "$sweep/$(basename "$run")" ] || cp -r "$run" "$sweep/"
  done
}
