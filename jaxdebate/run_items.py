"""A claim about one run as its items see it: McNemar's exact test of its last validation against its
first on the same items, from its per-item rows (:mod:`jaxdebate.validation_files`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jaxdebate import validation_files
from jaxdebate.stats import paired_mcnemar


def _item_rows(path: Path) -> dict[str, dict[str, bool]]:
    """``"set/mode" -> {id: correct_final}`` of one ``validation/step_<N>.jsonl`` file."""
    out: dict[str, dict[str, bool]] = {}
    for row in validation_files.read(path):
        out.setdefault(f"{row['set']}/{row['mode']}", {})[str(row["id"])] = bool(row["correct_final"])
    return out


def run_item_tests(workdir: str | Path) -> dict[str, dict[str, Any]]:
    """Per ``"set/mode"`` present in both the first and the last per-item validation file of a run:
    McNemar's exact test of the last step against the first on the same items (paired on ``id``).
    {} when the run wrote fewer than two such files (runs before per-item validation)."""
    files = validation_files.steps(workdir)
    if len(files) < 2:
        return {}
    (first_step, first_path), (last_step, last_path) = files[0], files[-1]
    first, last = _item_rows(first_path), _item_rows(last_path)
    out = {}
    for group in first:
        if group in last:
            test = paired_mcnemar(first[group], last[group])
            if test["n"]:
                out[group] = {"n": test["n"], "first_step": first_step, "last_step": last_step,
                              "first_acc": test["first_acc"], "last_acc": test["second_acc"],
                              "only_first": test["only_first"], "only_last": test["only_second"],
                              "p_mcnemar": test["p"]}
    return out


def run_item_test(workdir: str | Path, set: str = "heldout", mode: str = "debate") -> dict[str, Any] | None:
    """One run's first vs last validation on the same items of one set and mode (McNemar's exact
    test): ``n``, ``first_acc``, ``last_acc``, ``only_first``, ``only_last``, ``p_mcnemar`` (and the
    two steps); None when the run has no such per-item files."""
    return run_item_tests(workdir).get(f"{set}/{mode}")
