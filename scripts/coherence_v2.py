"""Issue 28's runs one after another, each followed by the multi-run report (commit it as it lands).

    .venv/bin/python scripts/coherence_v2.py                              # every variant at seed 1
    .venv/bin/python scripts/coherence_v2.py --variants dpo sft --seeds 2 3
    .venv/bin/python scripts/coherence_v2.py --variants dpo sft --seeds 1 2 3 --platinum   # + GSM8K-Platinum

A run is ``runs/coherence_v2/<variant>-seed<k>``: ``python -m jaxdebate.coherence all --config
configs/coherence_v2.py`` with the variant's overrides (``configs/coherence_v2.VARIANTS``) and
``dpo.seed=k``; the first one collects the shared rollouts, the others reuse them. A run whose
evaluation is written is skipped; ``--platinum`` then evaluates it on all 1,209 GSM8K-Platinum items
(``eval_platinum/``, 256 new tokens as in the first coherence study: its word problems need more than
the 48 of arithmetic) unless that is written too. The base model's answers are the same in every run
(the same items, weights, budget and format, which ``<eval dir>/base.jsonl.setting.json`` records), so
a new run starts from a finished run's ``base.jsonl`` instead of decoding them again. A run that fails
is reported and the next one runs. After every run: ``python -m jaxdebate.coherence.report
runs/coherence_v2 --out results/coherence-v2``.

The shared rollouts (``runs/coherence_v2/rollouts.jsonl``, collected once, ~8 MB) are kept in git as
``results/coherence-v2/rollouts.jsonl.gz``: written after every run (and by ``--save-rollouts`` alone,
e.g. after stopping a collection part-way: it is resumable), and unpacked from there when
``runs/coherence_v2`` lacks them, so a run on another machine or in another session trains on the same
pairs (``pairs_summary.json`` records the file's digest; the report warns when runs differ in it).

Which variant gets seeds 2 and 3 besides SFT: the report's ``selection`` (the highest held-out
accuracy at the exported epoch at seed 1), chosen before any of its evaluation figures are looked at.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from configs.coherence_v2 import ROOT as RUNS, VARIANTS  # noqa: E402

CONFIG = "configs/coherence_v2.py"
RESULTS = "results/coherence-v2"


ROLLOUTS = ROOT / RUNS / "rollouts.jsonl"
ARCHIVE = ROOT / RESULTS / "rollouts.jsonl.gz"


def restore_rollouts() -> None:
    """Unpack the committed rollouts where the runs read them, unless a collection is already there."""
    if ROLLOUTS.exists() or not ARCHIVE.is_file():
        return
    ROLLOUTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = ROLLOUTS.with_name(ROLLOUTS.name + ".tmp")
    tmp.write_bytes(gzip.decompress(ARCHIVE.read_bytes()))
    tmp.replace(ROLLOUTS)
    print(f"[coherence-v2] rollouts from {ARCHIVE.relative_to(ROOT)} ({sum(1 for _ in ROLLOUTS.open())} questions)",
          flush=True)


def save_rollouts() -> None:
    """Write the rollouts' complete lines (a collection stopped mid-line leaves a partial one) to the
    committed archive when they differ from it; gzip without a timestamp, so equal rollouts give equal
    bytes."""
    if not ROLLOUTS.is_file():
        return
    data = ROLLOUTS.read_bytes()
    data = data[:data.rfind(b"\n") + 1]
    if ARCHIVE.is_file() and gzip.decompress(ARCHIVE.read_bytes()) == data:
        return
    ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    ARCHIVE.write_bytes(gzip.compress(data, mtime=0))
    lines = data.count(b"\n")
    print(f"[coherence-v2] rollouts saved to {ARCHIVE.relative_to(ROOT)} ({lines} questions; "
          "commit it)", flush=True)


PLATINUM = ["data.eval=gsm8k_platinum", "eval.dir=eval_platinum", "sampler.max_new_tokens=256"]


def coherence(stage: str, workdir: str, overrides: list[str]) -> bool:
    cmd = [sys.executable, "-m", "jaxdebate.coherence", stage, "--config", CONFIG, "--workdir", workdir,
           "--no-progress", *[a for o in overrides for a in ("--set", o)]]
    print("[coherence-v2] " + " ".join(cmd[1:]), flush=True)
    code = subprocess.run(cmd, cwd=ROOT).returncode
    if code:
        print(f"[coherence-v2] {workdir} {stage}: FAILED (exit {code}); going on with the next run", flush=True)
    return code == 0


def seed_base_rows(workdir: Path, eval_dir: str) -> None:
    """Copy another run's finished base answers (and the setting they were made with) into ``workdir``;
    the evaluation refuses them if its setting differs, so a wrong copy cannot pass unnoticed."""
    target = workdir / eval_dir / "base.jsonl"
    if target.exists():
        return
    for other in sorted((ROOT / RUNS).glob(f"*/{eval_dir}/summary.json")):
        src = other.parent / "base.jsonl"
        side = src.with_name("base.jsonl.setting.json")
        if src.is_file() and side.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(side, target.with_name(side.name))
            shutil.copyfile(src, target)
            print(f"[coherence-v2] base answers for {workdir.name}/{eval_dir} from {other.parent.parent.name}",
                  flush=True)
            return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--platinum", action="store_true", help="also evaluate on all of GSM8K-Platinum")
    parser.add_argument("--save-rollouts", action="store_true",
                        help=f"only write the rollouts collected so far to {RESULTS}/rollouts.jsonl.gz")
    args = parser.parse_args()
    if args.save_rollouts:
        save_rollouts()
        return 0
    restore_rollouts()
    failed = []
    for name in args.variants:
        for seed in args.seeds:
            workdir = f"{RUNS}/{name}-seed{seed}"
            overrides = [f"variant={name}", f"dpo.seed={seed}", *VARIANTS[name]]
            ok = True
            if not (ROOT / workdir / "eval" / "summary.json").is_file():
                seed_base_rows(ROOT / workdir, "eval")
                ok = coherence("all", workdir, overrides)
            if ok and args.platinum and not (ROOT / workdir / "eval_platinum" / "summary.json").is_file():
                seed_base_rows(ROOT / workdir, "eval_platinum")
                ok = coherence("eval", workdir, [*overrides, *PLATINUM])
            save_rollouts()
            if not ok:
                failed.append(f"{name}-seed{seed}")
            if any((ROOT / RUNS).glob("*/eval/summary.json")):
                subprocess.run([sys.executable, "-m", "jaxdebate.coherence.report", RUNS, "--out", RESULTS],
                               cwd=ROOT, check=True)
            print(f"[coherence-v2] {name}-seed{seed} {'done' if ok else 'failed'}; results so far in {RESULTS} "
                  "(commit them)", flush=True)
    if failed:
        print(f"[coherence-v2] failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
