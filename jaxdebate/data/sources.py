"""Dataset names and where they are found.

Resolution of a name: explicit path → ``$JAXDEBATE_DATA/<file>`` → the repository's sibling
``../shared/data/<file>`` → the HF hub (needs the optional ``datasets`` package and a connection)
→ a DataError that says how to point at a local file.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from jaxdebate.data import readers
from jaxdebate.data.builtin import LEVELS, TEMPLATES, arithmetic_items
from jaxdebate.data.items import Item
from jaxdebate.errors import DataError

DATA_ENV_VAR = "JAXDEBATE_DATA"


@dataclasses.dataclass(frozen=True)
class NamedDataset:
    """A public dataset: its local file name, record format and HF hub location."""

    name: str
    filename: str
    fmt: str
    hub_path: str
    hub_config: str | None
    hub_split: str


DATASETS = {
    d.name: d
    for d in (
        NamedDataset("math500", "math500.jsonl", "math500", "HuggingFaceH4/MATH-500", None, "test"),
        NamedDataset("gsm8k_train", "gsm8k_train.jsonl", "gsm8k", "openai/gsm8k", "main", "train"),
        NamedDataset("gsm8k_test", "gsm8k_test.jsonl", "gsm8k", "openai/gsm8k", "main", "test"),
        NamedDataset(
            "gsm8k_platinum", "gsm8k_platinum_test.jsonl", "gsm8k_platinum",
            "madrylab/gsm8k-platinum", "main", "test",
        ),
    )
}
BUILTIN = ("arithmetic",)


def repo_shared_data_dir() -> Path:
    """``../shared/data`` next to the repository that holds this package."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def candidate_files(dataset: NamedDataset) -> list[Path]:
    """Local places where a named dataset's file is looked for, in order."""
    places = []
    if os.environ.get(DATA_ENV_VAR):
        places.append(Path(os.environ[DATA_ENV_VAR]).expanduser() / dataset.filename)
    places.append(repo_shared_data_dir() / dataset.filename)
    return places


def _parse_levels(text: str, spec: str) -> tuple[int, ...]:
    """``3`` -> (3,), ``1..3`` -> (1, 2, 3), ``2+4`` -> (2, 4)."""
    try:
        if ".." in text:
            low, high = (int(x) for x in text.split(".."))
            levels = tuple(range(low, high + 1))
        else:
            levels = tuple(int(x) for x in text.split("+"))
    except ValueError:
        raise DataError(f"builtin dataset {spec!r}: level={text!r} must be K, A..B or A+B+...") from None
    if not levels or any(level not in LEVELS for level in levels):
        raise DataError(f"builtin dataset {spec!r}: levels must lie in {LEVELS[0]}..{LEVELS[-1]}, got {text!r}")
    return levels


def _parse_templates(text: str, spec: str) -> tuple[str, ...]:
    """``2+1/2-1/1x1`` -> ("2+1", "2-1", "1x1"): names of :data:`jaxdebate.data.builtin.TEMPLATES`
    joined by ``/`` (a comma would end the option)."""
    names = tuple(t.strip() for t in text.split("/"))
    unknown = [t for t in names if t not in TEMPLATES]
    if not text.strip() or unknown or len(set(names)) != len(names):
        raise DataError(f"builtin dataset {spec!r}: templates={text!r} must be distinct names joined by '/' "
                        f"from {', '.join(TEMPLATES)}" + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    return names


def _parse_builtin(spec: str) -> list[Item]:
    """``arithmetic[:n=N,seed=S,level=K|A..B|A+B,templates=T/T/...,slice=A:B]``; ``slice`` keeps items
    ``A..B-1`` of the ``n`` generated, so two slices of one spec are disjoint (a training set and its
    held-out set). ``templates`` (not with ``level``) draws from single templates such as ``2+1``."""
    name, _, body = spec.partition(":")
    options: dict[str, int] = {"n": 64, "seed": 0}
    levels, templates, window = None, None, None
    for part in filter(None, (p.strip() for p in body.split(","))):
        key, sep, value = (x.strip() for x in part.partition("="))
        if sep and key == "level":
            levels = _parse_levels(value, spec)
            continue
        if sep and key == "templates":
            templates = _parse_templates(value, spec)
            continue
        if sep and key == "slice":
            try:
                start, stop = (int(x) for x in value.split(":"))
            except ValueError:
                raise DataError(f"builtin dataset {spec!r}: slice={value!r} must be A:B (integers)") from None
            window = (start, stop)
            continue
        if not sep or key not in options:
            raise DataError(f"builtin dataset option {part!r} in {spec!r}: expected n=INT, seed=INT, "
                            f"level=K|A..B, templates=T/T/... or slice=A:B")
        try:
            options[key] = int(value)
        except ValueError:
            raise DataError(f"builtin dataset option {part!r} in {spec!r} is not an integer") from None
    if options["n"] < 1:
        raise DataError(f"builtin dataset {spec!r}: n must be >= 1")
    if levels is not None and templates is not None:
        raise DataError(f"builtin dataset {spec!r}: give level= or templates=, not both")
    items = arithmetic_items(n=options["n"], seed=options["seed"], levels=levels, templates=templates)
    if window is None:
        return items
    start, stop = window
    if not 0 <= start < stop <= options["n"]:
        raise DataError(f"builtin dataset {spec!r}: slice={start}:{stop} must satisfy 0 <= A < B <= n={options['n']}")
    return items[start:stop]


def _from_hub(dataset: NamedDataset, tried: list[Path]) -> list[Item]:
    how = (
        f"Point jaxdebate at a local copy instead: pass the path of the .jsonl file, or put "
        f"{dataset.filename!r} in the directory named by ${DATA_ENV_VAR}. Looked in: "
        + ", ".join(str(p) for p in tried)
    )
    try:
        import datasets  # optional: pip install 'jaxdebate[hub]'
    except ImportError:
        raise DataError(
            f"dataset {dataset.name!r} was not found locally and the HF hub fallback needs the "
            f"optional 'datasets' package (pip install 'jaxdebate[hub]'). {how}"
        ) from None
    try:
        rows = datasets.load_dataset(dataset.hub_path, dataset.hub_config, split=dataset.hub_split)
    except Exception as e:  # noqa: BLE001 - any hub failure becomes one actionable message
        raise DataError(
            f"dataset {dataset.name!r}: loading {dataset.hub_path} ({dataset.hub_split}) from the HF "
            f"hub failed ({type(e).__name__}: {e}). {how}"
        ) from None
    where = f"hf://{dataset.hub_path}/{dataset.hub_split}"
    records = ((i, dict(row)) for i, row in enumerate(rows))
    items = readers.records_to_items(records, fmt=dataset.fmt, prefix=dataset.name, where=where)
    if not items:
        raise DataError(f"{where} holds no records")
    return items


def read_source(name_or_path: str, *, fmt: str | None = None) -> list[Item]:
    """Items of a dataset name (see DATASETS and BUILTIN) or of a JSONL path."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise DataError(f"dataset must be a name or a path, got {name_or_path!r}")
    spec = name_or_path.strip()
    readers.check_format(fmt)
    if spec.partition(":")[0] in BUILTIN:
        return _parse_builtin(spec)
    if spec in DATASETS:
        dataset = DATASETS[spec]
        tried = candidate_files(dataset)
        for path in tried:
            if path.is_file():
                return readers.read_jsonl(path, fmt=fmt or dataset.fmt, prefix=dataset.name)
        return _from_hub(dataset, tried)
    path = Path(spec).expanduser()
    if path.exists() or spec.endswith((".jsonl", ".json")) or os.sep in spec:
        return readers.read_jsonl(path, fmt=fmt)
    known = ", ".join([*DATASETS, *BUILTIN])
    raise DataError(f"unknown dataset {spec!r}: use one of {known}, or the path of a .jsonl file")


def load_items(
    name_or_path: str, *, env: str | None = None, limit: int | None = None, format: str | None = None
) -> list[Item]:
    """Items of a dataset: a name (``math500``, ``gsm8k_train``, ``gsm8k_test``, ``gsm8k_platinum``,
    ``arithmetic[:n=N,seed=S,level=A..B|templates=T/T/...]``) or the path of a .jsonl file (format
    detected from its fields, or ``format=`` one of :data:`readers.FORMATS`). ``env`` overrides every item's environment and
    ``limit`` keeps the first ``limit`` items."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"limit must be a positive integer or None, got {limit!r}")
    if env is not None and (not isinstance(env, str) or not env):
        raise DataError(f"env must be a non-empty string or None, got {env!r}")
    items = read_source(name_or_path, fmt=format)
    if limit is not None:
        items = items[:limit]
    if env is not None:
        items = [it.with_env(env) for it in items]
    return items
