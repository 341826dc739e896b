"""Issue 28's runs one after another, each followed by the multi-run report (commit it as it lands).

    .venv/bin/python scripts/coherence_v2.py                              # every variant at seed 1
    .venv/bin/python scripts/coherence_v2.py --variants dpo sft --seeds 2 3
    .venv/bin/python scripts/coherence_v2.py --variants dpo sft --seeds 1 2 3 --platinum   # + GSM8K-Platinum

A run is ``runs/coherence_v2/<variant>-seed<k>``: ``python -m jaxdebate.coherence all --config
configs/coherence_v2.py`` with the variant's overrides (``configs/coherence_v2.VARIANTS``) and
``dpo.seed=k``; the first one collects the shared rollouts, the others reuse them. A run whose
evaluation is written is skipped; ``--platinum`` then evaluates it on all 1,209 GSM8K-Platinum items
(``eval_platinum/``) unless that is written too. After every run: ``python -m jaxdebate.coherence.report
runs/coherence_v2 --out results/coherence-v2``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from configs.coherence_v2 import ROOT as RUNS, VARIANTS  # noqa: E402

CONFIG = "configs/coherence_v2.py"
RESULTS = "results/coherence-v2"


def coherence(stage: str, workdir: str, overrides: list[str]) -> None:
    cmd = [sys.executable, "-m", "jaxdebate.coherence", stage, "--config", CONFIG, "--workdir", workdir,
           "--no-progress", *[a for o in overrides for a in ("--set", o)]]
    print("[coherence-v2] " + " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--platinum", action="store_true", help="also evaluate on all of GSM8K-Platinum")
    args = parser.parse_args()
    for name in args.variants:
        for seed in args.seeds:
            workdir = f"{RUNS}/{name}-seed{seed}"
            overrides = [f"variant={name}", f"dpo.seed={seed}", *VARIANTS[name]]
            if not (ROOT / workdir / "eval" / "summary.json").is_file():
                coherence("all", workdir, overrides)
            if args.platinum and not (ROOT / workdir / "eval_platinum" / "summary.json").is_file():
                coherence("eval", workdir, [*overrides, "data.eval=gsm8k_platinum", "eval.dir=eval_platinum"])
            subprocess.run([sys.executable, "-m", "jaxdebate.coherence.report", RUNS, "--out", RESULTS],
                           cwd=ROOT, check=True)
            print(f"[coherence-v2] {name}-seed{seed} done; results so far in {RESULTS} (commit them)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
