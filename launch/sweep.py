"""Run the five-strategy sweep (strategy configs × seeds), locally or on SLURM through submitit.

    python launch/sweep.py --sweep-dir runs/sweep --seeds 42 43 44
    python launch/sweep.py --sweep-dir runs/smoke --base configs/smoke.py --seeds 0
    python launch/sweep.py --sweep-dir /shared/sweep --executor slurm --launch partition=gpu_8 qos=high

Re-running the same command skips finished runs and resumes interrupted ones from their checkpoints.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jaxdebate.errors import ConfigError  # noqa: E402
from jaxdebate.analysis import export_results  # noqa: E402
from jaxdebate.run_endpoints import ENDPOINTS  # noqa: E402
from jaxdebate.sweep import (  # noqa: E402
    EXECUTORS, KEEP_CHECKPOINTS, choose_executor, format_summary, parse_deadline, run_statuses, run_sweep,
)
from jaxdebate.sweep_plan import ORDERS, plan_runs  # noqa: E402


def _exporter(sweep_dir: str, out_dir: str, endpoint: str | None):
    """After each run: the sweep's results so far in ``out_dir`` (a failure to export is reported,
    never allowed to stop the sweep)."""
    def export(spec, state) -> None:
        try:
            export_results(sweep_dir, out_dir, endpoint)
            print(f"[sweep] {spec.name}: {state.get('status')}; results so far in {out_dir}", flush=True)
        except Exception as e:  # noqa: BLE001 - the runs matter more than their summary
            print(f"[sweep] exporting to {out_dir} failed after {spec.name}: {e}", file=sys.stderr, flush=True)

    return export


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep-dir", required=True, help="directory holding one workdir per run")
    parser.add_argument("--configs", nargs="+", default=None,
                        help="strategy config files, or a family directory for its five strategies "
                             "(default: the five in configs/)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42], help="training seeds (default: 42)")
    parser.add_argument("--order", choices=ORDERS, default="blocked",
                        help="blocked: one seed block after another, each block's configs in an order "
                             "drawn from its seed (default); configs: every seed of a config in turn")
    parser.add_argument("--base", default=None,
                        help="take everything but the shaping section from this config (e.g. configs/smoke.py)")
    parser.add_argument("--executor", choices=EXECUTORS, default=None,
                        help="local: one run after another here; submitit_local: the same through submitit's "
                             "local executor; slurm: submit every run to SLURM (default: the configs' "
                             "launch.executor, local unless a config or --launch executor=slurm says so)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override applied to every run (repeatable)")
    parser.add_argument("--launch", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="launch-section overrides, e.g. partition=gpu_8 gpus_per_node=8 qos=high "
                             "time_limit_minutes=600")
    parser.add_argument("--no-wait", action="store_true", help="slurm: submit and return without waiting")
    parser.add_argument("--status", action="store_true", help="print the summary table and exit")
    parser.add_argument("--quiet", action="store_true", help="don't echo the runs' output")
    parser.add_argument("--export", default=None, metavar="DIR",
                        help="after every local run, write the results so far to DIR (summary.json, table.md, "
                             "each run's metrics, config, run.json and first/last validation rows, plots): "
                             "what a results/ directory commits")
    parser.add_argument("--endpoint", default=None, choices=sorted(ENDPOINTS),
                        help="the primary endpoint of --export's comparison (default: the plan.json in the "
                             "--export directory if it has one, else final_accuracy)")
    parser.add_argument("--deadline", default=None, metavar="WHEN",
                        help="local: begin no seed block that would not end by WHEN ('+MINUTES' from now, or "
                             "an ISO time such as 2026-11-26T01:00); a begun block is finished")
    parser.add_argument("--keep-checkpoints", choices=KEEP_CHECKPOINTS, default="all",
                        help="what a finished local run keeps of its orbax checkpoints: all (default), the "
                             "last step, or none; metrics and validation rows always stay (a long sweep "
                             "cannot keep ~3 GB per run)")
    parser.add_argument("--no-shared-server", action="store_true",
                        help="local: every run starts its own vLLM server (default: runs that would start the "
                             "same one sample on one server the sweep keeps, which saves each its ~30 s start)")
    args = parser.parse_args(argv)
    try:
        deadline = parse_deadline(args.deadline) if args.deadline else None
        runs = plan_runs(args.sweep_dir, args.configs, args.seeds, base=args.base,
                         overrides=args.overrides, launch_overrides=args.launch, order=args.order)
        executor = choose_executor(runs, args.executor)
    except ConfigError as e:
        print(f"sweep: invalid configuration: {e}", file=sys.stderr)
        return 2
    if args.status:
        rows = run_statuses(runs)
    else:
        try:
            rows = run_sweep(runs, executor=executor, sweep_dir=args.sweep_dir,
                             wait=not args.no_wait, echo=not args.quiet,
                             after_run=_exporter(args.sweep_dir, args.export, args.endpoint) if args.export else None,
                             deadline=deadline, keep_checkpoints=args.keep_checkpoints,
                             share_server=not args.no_shared_server)
        except ConfigError as e:  # raised before any run starts (e.g. finished runs of another design)
            print(f"sweep: invalid configuration: {e}", file=sys.stderr)
            return 2
    print()
    print(format_summary(rows))
    (Path(args.sweep_dir) / "summary.json").write_text(json.dumps(rows, indent=2))
    failed = [r for r in rows if r["status"] == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
