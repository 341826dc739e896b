"""``python -m jaxdebate.coherence {collect,pairs,train,eval,all} --config configs/coherence.py
[--workdir DIR] [--limit N] [--set section.field=value ...]``"""

from __future__ import annotations

import argparse
import sys
import time

from jaxdebate.coherence.pipeline import STAGES, run
from jaxdebate.errors import JaxDebateError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m jaxdebate.coherence",
        description="Coherence DPO: 11-arm rollouts -> scores -> preference pairs -> DPO (LoRA) -> evaluation.",
    )
    parser.add_argument("stage", choices=[*STAGES, "all"], help="one stage, or 'all' to run them in order")
    parser.add_argument("--config", required=True, help="a config file exposing get_config() (configs/coherence.py)")
    parser.add_argument("--workdir", help="where the artefacts go (default: the config's workdir)")
    parser.add_argument("--limit", type=int, help="evaluate on the first N items only (sets data.eval_limit)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set data.n_questions=20 (repeatable)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from jaxdebate.coherence.config import CoherenceConfig
    from jaxdebate.configlib import format_config, load_config

    args = parse_args(argv)
    overrides = list(args.overrides)
    if args.limit is not None:
        overrides.append(f"data.eval_limit={args.limit}")
    try:
        config = load_config(args.config, overrides, expected=CoherenceConfig)
        if args.print_config:
            print(format_config(config))
            return 0
        stages = STAGES if args.stage == "all" else (args.stage,)
        started = time.perf_counter()
        results = run(config, stages, workdir=args.workdir, progress=not args.no_progress)
    except JaxDebateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return 130
    timing = ", ".join(f"{s} {results[f'{s}_seconds']:.1f} s" for s in stages)
    print(f"done in {time.perf_counter() - started:.1f} s ({timing})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
