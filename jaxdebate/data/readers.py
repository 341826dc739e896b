"""Record formats: turn one JSON object of a public dataset into an :class:`Item`.

Formats: ``math500`` (MATH-500: problem, answer, solution, subject, level, unique_id), ``gsm8k``
(question, answer with the gold number after ``####``), ``gsm8k_platinum`` (GSM8K-Platinum: as gsm8k
plus platinum_index, gsm8k_test_index) and ``items`` (jaxdebate's own: id, problem, answer, env, meta).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from jaxdebate.data.items import Item
from jaxdebate.errors import DataError

FORMATS = ("math500", "gsm8k", "gsm8k_platinum", "items")


class RecordError(ValueError):
    """A record that does not fit its format (the caller adds file and line)."""


def gsm8k_gold(solution: str) -> str:
    """The gold answer of a GSM8K solution: the number after the last ``####``, commas removed."""
    head, sep, tail = solution.rpartition("####")
    if not sep:
        raise RecordError("GSM8K answer has no '####' line with the final number")
    gold = tail.strip().splitlines()[0].strip() if tail.strip() else ""
    gold = gold.replace(",", "").replace("$", "").strip()
    if not gold:
        raise RecordError("GSM8K answer has nothing after '####'")
    return gold


def _text(record: Mapping[str, Any], field: str) -> str:
    if field not in record:
        raise RecordError(f"missing field {field!r} (fields present: {sorted(record)})")
    value = record[field]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RecordError(f"field {field!r} must be a string, got {type(value).__name__}")
    value = str(value)
    if not value.strip():
        raise RecordError(f"field {field!r} is empty")
    return value


def _math500(record: Mapping[str, Any], index: int, prefix: str) -> Item:
    meta = {k: record[k] for k in ("subject", "level", "unique_id", "solution") if k in record}
    item_id = str(record.get("unique_id") or f"{prefix}/{index}")
    return Item(item_id, _text(record, "problem"), _text(record, "answer").strip(), "math", meta)


def _gsm8k(record: Mapping[str, Any], index: int, prefix: str) -> Item:
    solution = _text(record, "answer")
    meta = {"index": index, "solution": solution.rpartition("####")[0].rstrip()}
    return Item(f"{prefix}/{index}", _text(record, "question"), gsm8k_gold(solution), "math", meta)


def _gsm8k_platinum(record: Mapping[str, Any], index: int, prefix: str) -> Item:
    solution = _text(record, "answer")
    pidx = record.get("platinum_index", index)
    meta = {"platinum_index": pidx, "solution": solution.rpartition("####")[0].rstrip()}
    for key in ("gsm8k_test_index", "answer_revised_vs_gsm8k", "cleaning_status"):
        if key in record:
            meta[key] = record[key]
    return Item(f"{prefix}/{pidx}", _text(record, "question"), gsm8k_gold(solution), "math", meta)


def _items(record: Mapping[str, Any], index: int, prefix: str) -> Item:
    meta = record.get("meta", {})
    if not isinstance(meta, Mapping):
        raise RecordError(f"field 'meta' must be an object, got {type(meta).__name__}")
    env = record.get("env", "math")
    if not isinstance(env, str) or not env:
        raise RecordError(f"field 'env' must be a non-empty string, got {env!r}")
    item_id = record.get("id", f"{prefix}/{index}")
    return Item(str(item_id), _text(record, "problem"), _text(record, "answer").strip(), env, meta)


CONVERTERS: dict[str, Callable[[Mapping[str, Any], int, str], Item]] = {
    "math500": _math500,
    "gsm8k": _gsm8k,
    "gsm8k_platinum": _gsm8k_platinum,
    "items": _items,
}


def detect_format(record: Mapping[str, Any]) -> str:
    """Guess a record's format from its fields."""
    if "platinum_index" in record or "cleaning_status" in record:
        return "gsm8k_platinum"
    if "question" in record and "answer" in record:
        return "gsm8k"
    if "problem" in record and "answer" in record:
        if "unique_id" in record or "solution" in record or "subject" in record:
            return "math500"
        return "items"
    raise RecordError(
        f"cannot tell the dataset format from fields {sorted(record)}: expected problem/answer "
        f"(MATH-500 or jaxdebate items) or question/answer (GSM8K, GSM8K-Platinum)"
    )


def check_format(fmt: str | None) -> str | None:
    if fmt is not None and fmt not in CONVERTERS:
        raise DataError(f"unknown dataset format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return fmt


def _undecodable(line: str) -> str | None:
    """Why a line read with ``surrogateescape`` is not UTF-8 (its first bad byte), or None."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"byte 0x{ord(line[e.start]) - 0xDC00:02x} at column {e.start + 1}"
    return None


def _parse_line(line: str, where: str) -> Any:
    """One JSON line; DataError naming ``where`` (file:line) when malformed or nested too deeply."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: malformed JSON line ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested too deeply to read") from None


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line; DataError names file and line.

    Bytes are decoded per line (``surrogateescape``) so that a non-UTF-8 byte is reported on its
    own line, not on the line where the decoder's read-ahead buffer happened to start.
    """
    try:
        f = open(path, encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError as e:
        raise DataError(f"dataset file not found: {path}") from e
    except IsADirectoryError as e:
        raise DataError(f"dataset path is a directory, expected a .jsonl file: {path}") from e
    except OSError as e:
        raise DataError(f"cannot read dataset file {path}: {e.strerror or e}") from e
    with f:
        try:
            for lineno, line in enumerate(f, start=1):
                bad = _undecodable(line)
                if bad is not None:
                    raise DataError(f"{path}:{lineno}: not UTF-8 text ({bad})")
                if not line.strip():
                    continue
                yield lineno, _parse_line(line, f"{path}:{lineno}")
        except OSError as e:
            raise DataError(f"cannot read dataset file {path}: {e.strerror or e}") from e


def records_to_items(
    records: Iterator[tuple[int, Any]], *, fmt: str | None, prefix: str, where: str
) -> list[Item]:
    """Convert (position, record) pairs; ``where`` names the source in errors (``file:line``)."""
    items: list[Item] = []
    seen: dict[str, Any] = {}  # id -> where it first appeared
    for index, (position, record) in enumerate(records):
        if not isinstance(record, Mapping):
            raise DataError(f"{where}:{position}: expected a JSON object, got {type(record).__name__}")
        try:
            kind = fmt or detect_format(record)
            item = CONVERTERS[kind](record, index, prefix)
        except (RecordError, DataError) as e:
            raise DataError(f"{where}:{position}: {e}") from None
        if item.id in seen:  # ids key per-item results and the validation rows: they must be unique
            raise DataError(f"{where}:{position}: duplicate id {item.id!r} (first at {where}:{seen[item.id]})")
        seen[item.id] = position
        items.append(dataclasses.replace(item, origin=f"{where}:{position}"))
        if fmt is None:
            fmt = kind
    return items


def read_jsonl(path: str | Path, *, fmt: str | None = None, prefix: str | None = None) -> list[Item]:
    """All items of a JSONL file; the format is detected from the first record unless given."""
    path = Path(path)
    fmt = check_format(fmt)
    items = records_to_items(_records(path), fmt=fmt, prefix=prefix or path.stem, where=str(path))
    if not items:
        raise DataError(f"dataset file {path} holds no records")
    return items
