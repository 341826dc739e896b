#!/usr/bin/env bash
# One session's share of the arithmetic-v2 main sweep (results/arithmetic-v2/PROTOCOL.md), run from
# this checkout: seed blocks back to back, each through scripts/arithmetic_v2_main.sh in a worktree of
# the pre-registered commit, and every finished run committed here as it lands (its exported files,
# then summary.json, table.md and the plots re-exported by this checkout's analysis), so a stopped
# session loses at most the run in flight.
#   END=2026-11-29T02:50+00:00 bash scripts/arithmetic_v2_session.sh
#   END=... RUN_S=1500 TREE=/work/sweep bash scripts/arithmetic_v2_session.sh
#   END=... DRY=1 bash scripts/arithmetic_v2_session.sh     # say which block would begin, start nothing
# END (required): when this session's runs must have ended. A block is begun only if its unfinished
# runs end by then at RUN_S seconds each: by default a fifth of the slowest of the last 5 complete
# blocks on a CPU with this machine's flags, or of the slowest block of any kind on a CPU kind new to
# the sweep, and never less than the mean run of every machine so far, which the sweep's own
# --deadline check uses (+600 s when this machine has no cached step-0 validation): on a fast kind
# the mean is the larger, and a block this script began would be refused by the sweep.
# A block's total varies less than its slowest run (one slow run in five is common). TREE: the worktree
# (default ../sweep; created at the commit below if missing, with this checkout's .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
COMMIT=8ccdb883b2fb4bdea79600e4d414deb4e0460da9  # PROTOCOL.md: every main run runs at this commit
B=2 N_BLOCKS=59 FIRST_SEED=1000                  # PROTOCOL.md "Decided by the pilot"
R=results/arithmetic-v2
: "${END:?set END, the time by which the runs of this session must end (e.g. 2026-11-29T02:50+00:00)}"
end_s=$(date -d "$END" +%s) || { echo "error: END=$END is not a time date(1) can read" >&2; exit 2; }
TREE=${TREE:-../sweep}
LOG=${LOG:-$PWD/runs/arithmetic_v2_session.log}
mkdir -p "$(dirname "$LOG")"
exec 9> "$LOG.lock"  # one session script at a time, and none beside a sweep started by hand
flock -n 9 || { echo "error: another arithmetic_v2_session.sh holds $LOG.lock" >&2; exit 2; }
if pgrep -f arithmetic_v2_main.sh > /dev/null; then
  echo "error: a sweep (scripts/arithmetic_v2_main.sh) is running already: $(pgrep -f arithmetic_v2_main.sh | tr '\n' ' ')" >&2
  exit 2
fi

flags=$(grep -o 'avx512[a-z_0-9]*\|amx[a-z_]*' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/ $//' || true)
family=$(lscpu | sed -n 's/^CPU family: *//p'); model=$(lscpu | sed -n 's/^Model: *//p')
case "$family/$model" in 25/1) kind="Zen 3 " ;; 25/17) kind="Zen 4 " ;; *) kind="" ;; esac
cpu="$kind$(lscpu | sed -n 's/^Model name: *//p') family $family model $model: ${flags:-no AVX-512 or AMX flags}"

# The packages that set the runs' numbers must be the ones the sweep ran with (pyproject.toml leaves
# them unpinned, so a fresh install resolves whatever the index offers then).
pins=$R/packages.txt
if ! drift=$(.venv/bin/python - "$pins" <<'EOF'
import re, sys
from importlib.metadata import PackageNotFoundError, version
drift = []
for line in open(sys.argv[1]):
    if not line.strip() or line.startswith("#"):
        continue
    name, want = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip()).groups()
    try:
        have = version(name)
    except PackageNotFoundError:
        have = "not installed"
    if have != want:
        drift.append(f"{name} {have} (the sweep's: {want})")
print("; ".join(drift))
sys.exit(1 if drift else 0)
EOF
); then
  echo "error: .venv differs from $pins: $drift; the sweep's numbers depend on these, so no block begins." \
    "Restore them: .venv/bin/pip install -r $pins" >&2
  exit 2
fi

# The worktree at the pre-registered commit, seeded with every committed run (the sweep skips them).
if [ ! -e "$TREE/.git" ] && [ -z "${DRY:-}" ]; then
  git worktree prune
  git worktree add --detach "$TREE" "$COMMIT"
fi
if [ -e "$TREE/.git" ]; then
  head=$(git -C "$TREE" rev-parse HEAD)
  [ "$head" = "$COMMIT" ] || { echo "error: $TREE is at $head, not the pre-registered $COMMIT" >&2; exit 2; }
fi
if [ -z "${DRY:-}" ]; then
  [ -e "$TREE/.venv" ] || ln -s "$PWD/.venv" "$TREE/.venv"
  mkdir -p "$TREE/$R/runs"
  for run in "$R"/runs/*/; do
    [ -e "$TREE/$R/runs/$(basename "$run")" ] || cp -r "$run" "$TREE/$R/runs/"
  done
fi

done_runs() {  # how many runs of seed $1 are committed here with status done
  local n=0 f
  for f in "$R"/runs/*-seed"$1"/run.json; do
    [ -e "$f" ] && grep -q '"status": "done"' "$f" && n=$((n + 1))
  done
  echo $n
}

run_seconds() {  # RUN_S, or a fifth of the slowest of the last 5 complete blocks on this CPU kind, and at
  # least the mean of all finished runs, the figure the sweep's own --deadline check multiplies (sweep.py)
  if [ -n "${RUN_S:-}" ]; then echo "$RUN_S"; return; fi
  .venv/bin/python - "$R/runs" "$flags" <<'EOF'
import collections, json, pathlib, re, sys
# runs record whole flag names (amx_bf16); this script's grep, the README's, cuts them at the digits (amx_bf)
def kind(flags): return " ".join(re.findall(r"avx512[a-z_0-9]*|amx[a-z_]*", flags))
blocks = collections.defaultdict(list)
for path in pathlib.Path(sys.argv[1]).glob("*-seed*/run.json"):
    run = json.loads(path.read_text())
    if run.get("status") == "done":
        blocks[path.parent.name.rsplit("-seed", 1)[1]].append(run)
whole = [runs for runs in blocks.values() if len(runs) == 5]
mine = sorted((max(r["finished_at"] for r in runs), sum(r["wall_time_s"] for r in runs))
              for runs in whole if all(kind(r.get("cpu_flags", "")) == sys.argv[2] for r in runs))
walls = [r["wall_time_s"] for runs in blocks.values() for r in runs]
mean = sum(walls) / len(walls) if walls else 0
if mine:
    slowest, basis = max(total for _, total in mine[-5:]), ""
elif whole:  # a CPU kind new to the sweep: the slowest block of any kind, until one of its own is in
    slowest, basis = max(sum(r["wall_time_s"] for r in runs) for runs in whole), "any"
else:
    sys.exit()
print(round(max(slowest / 5, mean)), basis)
EOF
}

land() {  # commit each run the sweep has exported since the last call (its run.json differs from ours)
  { grep -o '^\[sweep\] [a-z_]*-seed[0-9]*: [a-z]*; results so far' "$LOG" 2>/dev/null || true; } |
  while read -r _ run status _; do
    run=${run%:}; status=${status%;}
    cmp -s "$TREE/$R/runs/$run/run.json" "$R/runs/$run/run.json" && continue
    seed=${run##*-seed}
    rm -rf "$R/runs/$run"
    cp -r "$TREE/$R/runs/$run" "$R/runs/"
    nice -n 10 .venv/bin/python -m jaxdebate.analysis "$R/runs" --out "$R/plots" --results "$R" > "$LOG.export" 2>&1 \
      || { echo "[session] export failed after $run:" >&2; cat "$LOG.export" >&2; }
    n=$(ls -d "$R"/runs/*-seed"$seed" | wc -l)
    git add "$R/runs/$run" "$R/summary.json" "$R/table.md" "$R/answers.md" "$R/plots"
    git commit -q -m "results/arithmetic-v2: main sweep block $((seed - FIRST_SEED + 1)) (seed $seed), run $n/5:\
 ${run%-seed*} ($status; ${COMMIT:0:7}, $cpu)" -- "$R/runs/$run" "$R/summary.json" "$R/table.md" "$R/answers.md" "$R/plots"
    echo "[session] $(date -u +%H:%M:%S) UTC committed $run ($status): $(git log -1 --format=%h)"
  done
}

cache=${JAXDEBATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jaxdebate}/validation
echo "[session] $cpu; worktree $TREE at ${COMMIT:0:7}, packages as in $pins; ends by $(date -u -d @"$end_s" +%FT%H:%M) UTC"
while :; do
  block=""
  for ((i = 1; i <= N_BLOCKS; i++)); do
    left=$((5 - $(done_runs $((FIRST_SEED + i - 1)))))
    if [ "$left" -gt 0 ]; then block=$i; break; fi
  done
  [ -n "$block" ] || { echo "[session] all $N_BLOCKS blocks are in"; break; }
  read -r run_s basis <<< "$(run_seconds)" || true
  if [ -z "${run_s:-}" ]; then
    echo "[session] no complete block committed yet: set RUN_S, this machine's expected seconds a run" >&2
    exit 2
  fi
  [ "${basis:-}" != any ] || echo "[session] no complete block on this CPU kind yet: estimating from the slowest block of any kind"
  step0=0  # the block's first run validates step 0 when this machine has not cached it (~500 s)
  [ -n "$(ls -A "$cache" 2>/dev/null)" ] || step0=600
  need=$((left * run_s + step0)) now=$(date +%s)
  if [ $((now + need)) -gt "$end_s" ]; then
    echo "[session] block $block not begun: its $left runs need ~$((need / 60)) min at $run_s s a run," \
      "$(((end_s - now) / 60)) min left"
    break
  fi
  echo "[session] $(date -u +%H:%M:%S) UTC block $block (seed $((FIRST_SEED + block - 1))): $left runs, ~$((need / 60)) min"
  [ -z "${DRY:-}" ] || exit 0
  (cd "$TREE" && B=$B N=$block DEADLINE=$END bash scripts/arithmetic_v2_main.sh) > "$LOG" 2>&1 &
  sweep=$!
  while kill -0 $sweep 2>/dev/null; do land || echo "[session] landing failed; retried in a minute" >&2; sleep 60; done
  wait $sweep || echo "[session] the sweep exited with status $? (log: $LOG)" >&2
  land || { echo "[session] landing failed after the sweep of block $block" >&2; exit 1; }
  cp "$LOG" "${LOG%.log}_block$block.log"
  have=$(done_runs $((FIRST_SEED + block - 1)))
  refused=$(grep '^\[sweep\] stopping before' "$LOG" || true)
  if [ "$have" -eq $((5 - left)) ] && [ -n "$refused" ]; then
    echo "[session] block $block not begun by the sweep's own deadline check: $refused"
    break
  fi
  if [ "$have" -lt 5 ]; then
    echo "[session] block $block is not complete after its sweep (log: ${LOG%.log}_block$block.log); stopping" >&2
    exit 1
  fi
done
