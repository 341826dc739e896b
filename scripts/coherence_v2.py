"""Issue 28's runs one after another, each followed by the multi-run report (commit it as it lands).

    .venv/bin/python scripts/coherence_v2.py                              # every variant at seed 1
    .venv/bin/python scripts/coherence_v2.py --variants dpo sft --seeds 2 3
    .venv/bin/python scripts/coherence_v2.py --variants dpo sft --seeds 1 2 3 --platinum   # + GSM8K-Platinum
    .venv/bin/python scripts/coherence_v2.py --variants rpo sft --seeds 1 2 3 --platinum --platinum-sampler vllm
    .venv/bin/python scripts/coherence_v2.py --deadline 2026-11-27T08:25   # begin nothing that ends later

A run is ``runs/coherence_v2/<variant>-seed<k>``: ``python -m jaxdebate.coherence all --config
configs/coherence_v2.py`` with the variant's overrides (``configs/coherence_v2.VARIANTS``) and
``dpo.seed=k``; the first one collects the shared rollouts, the others reuse them. A run whose
evaluation is written is skipped; ``--platinum`` then evaluates it on all 1,209 GSM8K-Platinum items
(``eval_platinum/``, 256 new tokens as in the first coherence study: its word problems need more than
the 48 of arithmetic) unless that is written too; ``--platinum-sampler vllm`` decodes it on the vLLM CPU server
in fp32 instead of the JAX sampler (the same texts, 1.25x faster on Zen 3), in batches of 128 (0.75x the time
of 32, the same texts: bench/README "GSM8K-Platinum"). The base model's answers are the same in every run
(the same items, weights, decoder, budget and format, which ``<eval dir>/base.jsonl.setting.json``
records), so a new run starts from a finished run's ``base.jsonl`` made by this machine's decoder
instead of decoding them again. A run that fails
is reported and the next one runs. After every run: ``python -m jaxdebate.coherence.report
runs/coherence_v2 --out results/coherence-v2``.

The shared rollouts (``runs/coherence_v2/rollouts.jsonl``, collected once, ~8 MB) are kept in git as
``results/coherence-v2/rollouts.jsonl.gz``: written after every run (and by ``--save-rollouts`` alone,
e.g. after stopping a collection part-way: it resumes) and unpacked from there when the local file is
missing or a shorter prefix of it. A local file that is neither a prefix nor an extension of the
archive (another collection) stops the driver before anything runs: the archive is never replaced by
another collection. Finished runs are kept in git too (``results/coherence-v2/runs/``, each in its own
layout less its weights; :func:`jaxdebate.coherence.report.keep_run`), and a new machine's
``runs/coherence_v2/`` is seeded from them, so a run finished in an earlier session is skipped and
reported, not re-run. The final models' runs (the selected variant's and SFT's) keep their adapter there
too; a ``--platinum`` evaluation of a kept run without one (kept before adapters were) re-makes the run
first (same config and seed) and says whether the re-made adapter is the committed run's, byte for byte
(its digest is in the evaluation's setting; ``remade.json``). Only this driver restores and
seeds: a bare ``python -m jaxdebate.coherence all --config configs/coherence_v2.py`` in a fresh checkout
would collect anew.

Which variant gets seeds 2 and 3 besides SFT: the report's ``selection`` (the highest held-out
accuracy at the exported epoch at seed 1), chosen before any of its evaluation figures are looked at.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from configs.coherence_v2 import ROLLOUTS as ROLLOUTS_FILE, ROOT as RUNS, VARIANTS  # noqa: E402
from jaxdebate import jsonl  # noqa: E402
from jaxdebate.errors import ConfigError, DataError  # noqa: E402
from jaxdebate.sweep import parse_deadline  # noqa: E402

CONFIG = "configs/coherence_v2.py"
RESULTS = "results/coherence-v2"


ROLLOUTS = ROOT / ROLLOUTS_FILE
ARCHIVE = ROOT / RESULTS / "rollouts.jsonl.gz"


def _complete_lines(data: bytes) -> bytes:
    """``data`` up to its last newline: a collection stopped mid-append leaves a partial last line."""
    return data[:data.rfind(b"\n") + 1]


def restore_rollouts() -> None:
    """Unpack the committed rollouts where the runs read them when the local file is missing or a
    shorter prefix of them; a local file that extends them is kept (a collection under way); any other
    local file is another collection: DataError, before anything runs."""
    if not ARCHIVE.is_file():
        return
    kept = gzip.decompress(ARCHIVE.read_bytes())
    local = _complete_lines(ROLLOUTS.read_bytes()) if ROLLOUTS.is_file() else b""
    if local.startswith(kept):
        return
    if not kept.startswith(local):
        raise DataError(f"{ROLLOUTS} is another collection than {ARCHIVE} (neither is a prefix of the other): "
                        "move it away to use the committed rollouts")
    ROLLOUTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = ROLLOUTS.with_name(ROLLOUTS.name + ".tmp")
    tmp.write_bytes(kept)
    tmp.replace(ROLLOUTS)
    questions = kept.count(b"\n")
    print(f"[coherence-v2] rollouts from {ARCHIVE.relative_to(ROOT)} ({questions} questions)", flush=True)


def save_rollouts() -> None:
    """Write the rollouts' complete lines to the committed archive when they extend it (gzip without a
    timestamp: equal rollouts, equal bytes); never replace it with another collection."""
    if not ROLLOUTS.is_file():
        return
    data = _complete_lines(ROLLOUTS.read_bytes())
    kept = gzip.decompress(ARCHIVE.read_bytes()) if ARCHIVE.is_file() else b""
    if data == kept:
        return
    if not data.startswith(kept):
        raise DataError(f"{ROLLOUTS} does not extend {ARCHIVE} (another collection): not saved")
    ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    ARCHIVE.write_bytes(gzip.compress(data, mtime=0))
    questions = data.count(b"\n")
    print(f"[coherence-v2] rollouts saved to {ARCHIVE.relative_to(ROOT)} ({questions} questions; "
          "commit it)", flush=True)


def seed_runs() -> None:
    """Copy the committed finished runs (``results/coherence-v2/runs/``) that ``runs/coherence_v2`` lacks,
    so they are skipped and reported like runs made here."""
    for kept in sorted((ROOT / RESULTS / "runs").glob("*/eval/summary.json")):
        run = kept.parent.parent
        target = ROOT / RUNS / run.name
        if not (target / "eval" / "summary.json").exists():
            shutil.copytree(run, target, dirs_exist_ok=True)
            print(f"[coherence-v2] {run.name}: finished in an earlier session, from {RESULTS}/runs", flush=True)


_PLATINUM = ["data.eval=gsm8k_platinum", "eval.dir=eval_platinum", "sampler.max_new_tokens=256"]
# the GSM8K-Platinum evaluation's overrides by what decodes it (--platinum-sampler): the config's
# in-process JAX sampler in fp32, or the vLLM CPU server pinned to fp32 (`auto` would pick bf16 on CPUs
# with avx512_bf16: another precision)
PLATINUM: dict[str, list[str]] = {
    "jax": _PLATINUM,
    # batches of 128 keep the server's continuous batching fuller: 0.75x the time of 32, the same texts
    # (bench/README "GSM8K-Platinum")
    "vllm": [*_PLATINUM, "sampler.backend=vllm", "sampler.vllm.dtype=float32", "eval.batch_size=128"],
}


def coherence(stage: str, workdir: str, overrides: list[str]) -> bool:
    cmd = [sys.executable, "-m", "jaxdebate.coherence", stage, "--config", CONFIG, "--workdir", workdir,
           "--no-progress", *[a for o in overrides for a in ("--set", o)]]
    print("[coherence-v2] " + " ".join(cmd[1:]), flush=True)
    code = subprocess.run(cmd, cwd=ROOT).returncode
    if code:
        print(f"[coherence-v2] {workdir} {stage}: FAILED (exit {code}); going on with the next run", flush=True)
    return code == 0


def expected_seconds(name: str, stages: tuple[str, ...]) -> float | None:
    """Wall seconds ``stages`` should take for variant ``name``: the mean over its finished runs (any
    seed), else the longest finished run of any variant; None before any run has them all."""
    finished: dict[str, list[float]] = {}
    for run in (ROOT / RUNS).glob("*-seed*"):
        files = [run / "stages" / f"{stage}.json" for stage in stages]
        if all(f.is_file() for f in files):
            took = sum(json.loads(f.read_text())["seconds"] for f in files)
            finished.setdefault(_variant(run.name), []).append(took)
    if name in finished:
        return sum(finished[name]) / len(finished[name])
    return max((took for runs in finished.values() for took in runs), default=None)


def _variant(run: str) -> str:
    """``dpo-beta0.3`` of ``dpo-beta0.3-seed2``."""
    return run.rsplit("-seed", 1)[0]


def fits(run: str, stages: tuple[str, ...], deadline: float | None) -> bool:
    """Whether ``run`` (variant-seed) is expected to end by ``deadline``; says why not. A run with no
    estimate yet is begun."""
    if deadline is None:
        return True
    expected = expected_seconds(_variant(run), stages)
    if expected is None or time.time() + expected <= deadline:
        return True
    end = time.strftime("%H:%M", time.localtime(deadline))
    print(f"[coherence-v2] {run}: not begun, {' + '.join(stages)} should take ~{expected / 60:.0f} min and "
          f"would end past the deadline ({end}); stopping here", flush=True)
    return False


def this_decoder(overrides: tuple[str, ...] | list[str] = ()) -> str:
    """The decoder the runs here will evaluate with (``sampling.factory.decoder`` of the config with
    ``overrides``)."""
    from jaxdebate.configlib import load_config
    from jaxdebate.sampling.factory import decoder

    config = load_config(ROOT / CONFIG, overrides)
    return decoder(config.sampler, config.model.dtype)


def seed_base_rows(workdir: Path, eval_dir: str, decoder: str) -> None:
    """Copy another run's finished base answers (and the setting they were made with) into ``workdir``
    when ``decoder`` made them (a run from another CPU kind's session decodes them again); the
    evaluation refuses them if any other part of its setting differs, so a wrong copy cannot pass."""
    target = workdir / eval_dir / "base.jsonl"
    if target.exists():
        return
    for other in sorted((ROOT / RUNS).glob(f"*/{eval_dir}/summary.json")):
        src = other.parent / "base.jsonl"
        side = src.with_name("base.jsonl.setting.json")
        if src.is_file() and side.is_file() and json.loads(side.read_text()).get("decoder") == decoder:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(side, target.with_name(side.name))
            shutil.copyfile(src, target)
            print(f"[coherence-v2] base answers for {workdir.name}/{eval_dir} from {other.parent.parent.name}",
                  flush=True)
            return


def set_aside(workdir: Path) -> Path:
    """Move a kept run out of the runs directory (where the report would read it as a second run) before
    it is re-made; returns where it went."""
    aside = ROOT / f"{RUNS}_set_aside" / workdir.name
    if aside.exists():
        shutil.rmtree(aside)
    aside.parent.mkdir(parents=True, exist_ok=True)
    workdir.rename(aside)
    print(f"[coherence-v2] {workdir.name}: kept without its adapter; re-made (the kept run is in {aside})", flush=True)
    return aside


def put_back(workdir: Path, kept: Path) -> None:
    """A re-make that failed: the kept run goes back where it was (the partial one is dropped)."""
    shutil.rmtree(workdir, ignore_errors=True)
    kept.rename(workdir)


def compare_remade(workdir: Path, kept: Path) -> None:
    """Whether the re-made run's adapter is the kept run's (the digest its evaluation recorded) and its
    evaluation answers the same; written to ``workdir/remade.json`` and said. Another adapter is no
    failure (the re-made run replaces the kept one, same config and seed; the report shows its figures),
    but it is said and recorded."""
    def setting(run: Path) -> dict:
        return json.loads((run / "eval" / "dpo.jsonl.setting.json").read_text())

    def answers(run: Path) -> list[str]:
        return [r["dpo"]["text"] for r in jsonl.read_records(run / "eval" / "comparison.jsonl")]

    def trained(run: Path) -> dict:
        return json.loads((run / "stages" / "train.json").read_text())["provenance"]

    def accuracy(run: Path) -> float:
        return json.loads((run / "eval" / "summary.json").read_text())["dpo_accuracy"]

    old, new = answers(kept), answers(workdir)
    kept_stage, new_stage = trained(kept), trained(workdir)
    record = {
        "kept_weights": setting(kept).get("weights"), "remade_weights": setting(workdir).get("weights"),
        "kept_commit": kept_stage["commit"], "remade_commit": new_stage["commit"],
        # fp32 kernels differ between CPU kinds: a seed re-made on another kind is another model, said here
        "kept_cpu_flags": kept_stage.get("cpu_flags"), "remade_cpu_flags": new_stage.get("cpu_flags"),
        "kept_accuracy": accuracy(kept), "remade_accuracy": accuracy(workdir),
        "answers": len(new), "answers_differing": sum(a != b for a, b in zip(old, new)) + abs(len(old) - len(new)),
    }
    record["same_adapter"] = record["kept_weights"] == record["remade_weights"]
    (workdir / "remade.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"[coherence-v2] {workdir.name} re-made: " + (
        "the same adapter, byte for byte" if record["same_adapter"] else
        f"ANOTHER adapter than the kept run's ({record['kept_weights']} then, {record['remade_weights']} now)")
        + f"; {record['answers_differing']} of {record['answers']} evaluation answers differ; accuracy "
          f"{record['kept_accuracy']:.3f} kept, {record['remade_accuracy']:.3f} re-made", flush=True)


def run_all(variants: list[str], seeds: list[int], *, platinum: str | None, deadline: float | None) -> list[str]:
    """Each variant at each seed, skipping what is written, the report after every run; ``platinum``
    names the sampler of a GSM8K-Platinum evaluation (None: none); stops before a run that would end
    past ``deadline``. Returns the failed runs."""
    decoder = this_decoder()
    platinum_sets = PLATINUM[platinum] if platinum else []
    platinum_decoder = this_decoder(platinum_sets)
    failed = []
    for name in variants:
        for seed in seeds:
            run = f"{name}-seed{seed}"
            workdir = f"{RUNS}/{run}"
            overrides = [f"variant={name}", f"dpo.seed={seed}", *VARIANTS[name]]
            also_platinum = bool(platinum) and not (ROOT / workdir / "eval_platinum" / "summary.json").is_file()
            evaluated = (ROOT / workdir / "eval" / "summary.json").is_file()
            # a kept run without its adapter cannot be evaluated again: it is re-made, then compared
            remake = evaluated and also_platinum and not (ROOT / workdir / "adapter").is_dir()
            train = not evaluated or remake
            stages = ("train", "eval") * train + ("eval_platinum",) * also_platinum
            if stages and not fits(run, stages, deadline):
                return failed
            ok = True
            if train:
                kept = set_aside(ROOT / workdir) if remake else None
                seed_base_rows(ROOT / workdir, "eval", decoder)
                ok = coherence("all", workdir, overrides)
                if kept is not None:
                    compare_remade(ROOT / workdir, kept) if ok else put_back(ROOT / workdir, kept)
            if ok and also_platinum:
                seed_base_rows(ROOT / workdir, "eval_platinum", platinum_decoder)
                ok = coherence("eval", workdir, [*overrides, *platinum_sets])
            save_rollouts()
            if not ok:
                failed.append(run)
            if any((ROOT / RUNS).glob("*/eval/summary.json")):
                subprocess.run([sys.executable, "-m", "jaxdebate.coherence.report", RUNS, "--out", RESULTS],
                               cwd=ROOT, check=True)
            print(f"[coherence-v2] {run} {'done' if ok else 'failed'}; results so far in {RESULTS} "
                  "(commit them)", flush=True)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--platinum", action="store_true", help="also evaluate on all of GSM8K-Platinum")
    parser.add_argument("--platinum-sampler", choices=list(PLATINUM), default="jax",
                        help="what decodes GSM8K-Platinum: the in-process JAX sampler (the config's) or the vLLM "
                             "CPU server, both in fp32 (default: %(default)s)")
    parser.add_argument("--save-rollouts", action="store_true",
                        help=f"only write the rollouts collected so far to {RESULTS}/rollouts.jsonl.gz")
    parser.add_argument("--deadline", default=None, metavar="WHEN",
                        help="begin no run that would not end by WHEN ('+MINUTES' from now, or an ISO time such "
                             "as 2026-11-27T08:30), estimated from the finished runs' stage times; a begun run "
                             "is finished")
    args = parser.parse_args()
    try:
        deadline = parse_deadline(args.deadline) if args.deadline else None
    except ConfigError as e:
        parser.error(str(e))
    if args.save_rollouts:
        save_rollouts()
        return 0
    restore_rollouts()
    seed_runs()
    failed = run_all(args.variants, args.seeds, platinum=args.platinum_sampler if args.platinum else None, deadline=deadline)
    if failed:
        print(f"[coherence-v2] failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
