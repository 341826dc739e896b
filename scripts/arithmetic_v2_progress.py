"""The README's arithmetic-v2 "Progress" figures from the committed runs: a finished block's table row, its
minutes from first start to last finish (less a resumed run's pause and an interruption between runs), the
first-step sample fingerprints of every block, and the collapse counts the README quotes (what the runs
answered, as in answers.md).
Descriptive bookkeeping for whoever continues the sweep; no test and no claim rests on it (PROTOCOL.md:
interim figures are descriptive only).

    .venv/bin/python scripts/arithmetic_v2_progress.py --seed 1030   # the row of block 31, then the counts
    .venv/bin/python scripts/arithmetic_v2_progress.py --table       # every complete block's row
    .venv/bin/python scripts/arithmetic_v2_progress.py               # the counts only
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from jaxdebate.answer_profile import profiles, tokens_cell, top_cell
from jaxdebate.sweep_runs import Run, load_sweep

RESULTS = Path(__file__).resolve().parent.parent / "results" / "arithmetic-v2"
ARMS = ("identity", "difference_rewards", "potential_based", "coma", "reward_mixing")
FIRST_SEED = 1000  # block 1 (PROTOCOL.md)
FINAL_STEP = 12
LOW = 0.10  # the README bolds and counts final debate accuracies below this
REPEATS = 30  # a run "repeats one number" when its commonest answer covers at least this many debates
# The session script starts a block's next run within seconds of the last one's end; a longer wait means
# the block was interrupted (its session ended) and finished in a later one.
IDLE_S = 600


# The recorded flag sets (run.json ``cpu_flags``) of the machine kinds the sweep has met, by the README's
# names; the session script names them by lscpu's family/model, which run.json does not keep.
KNOWN_KINDS = {
    "(AVX2 only: no AVX-512/AMX)": "Zen 3",  # the only AVX2-only kind met (family 25 model 1)
    "avx512_bf16 avx512_bitalg avx512_vbmi2 avx512_vnni avx512_vpopcntdq avx512bw avx512cd avx512dq avx512f "
    "avx512ifma avx512vbmi avx512vl": "Zen 4",
    "amx_bf16 amx_int8 amx_tile avx512_bf16 avx512_bitalg avx512_fp16 avx512_vbmi2 avx512_vnni avx512_vpopcntdq "
    "avx512bw avx512cd avx512dq avx512f avx512ifma avx512vbmi avx512vl": "Xeon AMX",
}


def cpu_kind(flags: str) -> str:
    """The README's name for a run's machine kind, or ``new kind: <flags>`` for a flag set the sweep has
    not met (a Zen 5 has avx512_vp2intersect): name it above and in the README before quoting it."""
    return KNOWN_KINDS.get(flags, f"new kind: {flags}")


TABLE_HEAD = ("| block (seed) | machine | block (min) | run wall (s) | " + " | ".join(ARMS) + " |\n"
              + "|---" * (4 + len(ARMS)) + "|")


def pauses(run: Run) -> list[float]:
    """The seconds a resumed run stood still: from its last metrics row before each later attempt's
    start (work after that row was lost with the stopped process) to that start."""
    gaps = []
    for attempt in run.state.get("history", [])[1:]:
        before = [r["time"] for r in run.records if r.get("time", float("inf")) < attempt["started_at"]]
        if before:
            gaps.append(attempt["started_at"] - max(before))
    return gaps


def idle_gaps(spans: list[tuple[float, float]]) -> list[float]:
    """The waits longer than IDLE_S during which none of a block's runs (start, end) was in progress."""
    gaps, reached = [], None
    for start, end in sorted(spans):
        if reached is not None and start - reached > IDLE_S:
            gaps.append(start - reached)
        reached = end if reached is None else max(reached, end)
    return gaps


def block_row(seed: int, runs: list[Run], verbose: bool = True) -> str:
    """The table row of one finished block: its minutes from the first run's start to the last run's
    end, less the pauses of a run resumed in a later session and the waits between runs when the block
    was interrupted (each marked), and each run's wall time on the same terms; SystemExit naming the
    run that is not done."""
    by_name = {run.name: run for run in runs}
    cells, walls, kinds, starts, ends, paused = [], [], set(), [], [], []
    for arm in ARMS:
        name = f"{arm}-seed{seed}"
        run = by_name.get(name)
        info = run.state if run is not None else {}
        if info.get("status") != "done":
            sys.exit(f"{RESULTS / 'runs' / name}: not a finished run (status {info.get('status')!r}); the block is incomplete")
        validations = [r for r in run.records if "val/debate/accuracy/debate" in r]
        if not validations or validations[-1]["step"] != FINAL_STEP:
            sys.exit(f"{run.workdir}: no debate validation at step {FINAL_STEP}")
        accuracy = validations[-1]["val/debate/accuracy/debate"]
        cells.append(f"**{accuracy:.3f}**" if accuracy < LOW else f"{accuracy:.3f}")
        history = info.get("history") or [info]
        gaps = pauses(run)
        paused += gaps
        # run.json's wall_time_s is the last attempt's; a resumed run's is its whole span less its pauses
        wall = info["finished_at"] - history[0]["started_at"] - sum(gaps) if gaps else info["wall_time_s"]
        walls.append(wall)
        kinds.add(cpu_kind(info["cpu_flags"]))
        starts.append(history[0]["started_at"])
        ends.append(info["finished_at"])
        if verbose:
            resumed = (f" over {len(history)} attempts ({sum(gaps) / 60:,.0f} min of pause left out)"
                       if gaps else "")
            print(f"{arm}: commit {info['commit'][:7]}, {cpu_kind(info['cpu_flags'])}, {wall:,.0f} s{resumed}")
    idle = idle_gaps(list(zip(starts, ends)))
    if verbose and idle:
        print(f"interrupted: {sum(idle) / 60:,.0f} min between runs left out")
    minutes = (max(ends) - min(starts) - sum(paused) - sum(idle)) / 60
    mark = (" (resumed)" if paused else "") + (" (interrupted)" if idle else "")
    return (f"| {seed - FIRST_SEED + 1} ({seed}) | {'/'.join(sorted(kinds))} | {minutes:.0f}{mark} | "
            f"{min(walls):,.0f}–{max(walls):,.0f} | " + " | ".join(cells) + " |")


def complete_seeds(runs: list[Run]) -> list[int]:
    """The seeds whose five runs are all done, in order."""
    done: dict[int, set[str]] = {}
    for run in runs:
        if run.seed is not None and run.state.get("status") == "done":
            done.setdefault(run.seed, set()).add(run.strategy)
    return sorted(seed for seed, arms in done.items() if arms == set(ARMS))


def fingerprints(runs: list[Run]) -> str:
    """Whether the five arms of every complete block drew the same first-step samples, and whether the
    blocks drew different ones (``train/samples_fingerprint`` at step 1)."""
    by_seed: dict[int, dict[str, object]] = {}
    for run in runs:
        first = [r for r in run.records if r.get("step") == 1 and "train/samples_fingerprint" in r]
        if first and run.seed is not None:
            by_seed.setdefault(run.seed, {})[run.strategy] = first[0]["train/samples_fingerprint"]
    complete = {s: arms for s, arms in by_seed.items() if set(arms) == set(ARMS)}
    unequal = [s for s, arms in complete.items() if len(set(arms.values())) != 1]
    shared = len({next(iter(arms.values())) for arms in complete.values()}) != len(complete)
    within = f"unequal across arms in blocks of seeds {unequal}" if unequal else "equal across arms in every one"
    return (f"fingerprints: {len(complete)} complete blocks, {within}; "
            f"{'some blocks share one' if shared else 'distinct between blocks'}")


def collapse_counts(runs: list[Run]) -> None:
    """The counts the README quotes about what the runs answered (jaxdebate.answer_profile, the source of
    answers.md): runs below LOW by arm, their step-6 accuracies, each such run's answers, and the runs
    whose commonest answer covers at least REPEATS debates."""
    done = sorted((run for run in runs if run.state.get("status") == "done"),
                  key=lambda run: (ARMS.index(run.strategy), run.seed))  # answers.md order: arm, then seed
    found = profiles(done)
    low = [p for p in found if p.accuracy < LOW]
    high = [p for p in found if p.accuracy >= LOW]
    by_arm = {arm: sum(p.name.startswith(arm + "-") for p in low) for arm in ARMS}
    print(f"{len(found)} runs, {len(low)} below {LOW:.2f}: {by_arm}")

    def step6(p) -> float:
        return dict(p.curve)[6]

    if low and high:
        print(f"  of those, {sum(step6(p) < 0.20 for p in low)} below 0.20 at step 6 "
              f"(median {statistics.median(map(step6, low)):.3f}); the others: "
              f"{sum(step6(p) < 0.20 for p in high)} of {len(high)} (median {statistics.median(map(step6, high)):.3f})")
    for p in low:
        print(f"  {p.name}: step 6 {step6(p):.3f}, final {p.accuracy:.3f}, no answer {p.no_answer}, "
              f"commonest {top_cell(p)}, distinct {p.distinct}, tokens {tokens_cell(p)}"
              + (f"  <- repeats one number (>= {REPEATS})" if p.top_count >= REPEATS else ""))
    repeating = [p for p in found if p.top_count >= REPEATS]
    print(f"of all {len(found)} runs (any accuracy), {len(repeating)} give one answer in >= {REPEATS} debates")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, help="print the README table row of this finished block first")
    parser.add_argument("--table", action="store_true", help="print the README table of every complete block first")
    args = parser.parse_args()
    runs = load_sweep(RESULTS / "runs")  # each run.json and metrics.jsonl read once, for all three
    if args.table:
        print(TABLE_HEAD)
        for seed in complete_seeds(runs):
            print(block_row(seed, runs, verbose=False))
    if args.seed is not None:
        print(block_row(args.seed, runs))
    print(fingerprints(runs))
    collapse_counts(runs)


if __name__ == "__main__":
    main()
