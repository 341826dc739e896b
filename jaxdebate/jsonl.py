"""JSONL files, one JSON object per line: read with file:line errors, appended so that they survive
being killed mid-write, replaced atomically.

A killed writer can leave a last line without its newline, or cut inside a record. ``repair_tail``
drops such a line (and only it) so a restarted stage redoes that record; a malformed line elsewhere
is an error naming the file and line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jaxdebate.errors import DataError


def repair_tail(path: str | Path) -> int:
    """Truncate an unfinished last line (no trailing newline, or not valid JSON); return bytes dropped."""
    path = Path(path)
    if not path.is_file():
        return 0
    data = path.read_bytes()
    if not data:
        return 0
    keep = len(data)
    if not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    else:
        start = data.rfind(b"\n", 0, len(data) - 1) + 1
        try:
            json.loads(data[start:])
        except ValueError:
            keep = start
    if keep < len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)
    return len(data) - keep


def read_records(path: str | Path, *, required: Sequence[str] = (), live: bool = False) -> list[dict[str, Any]]:
    """Every record of a JSONL file (blank lines skipped); a line that is not a JSON object, or lacks a
    ``required`` field, raises DataError with file:line. ``live``: the file may be being written (a
    live run's metrics) or was cut by a kill, so a last line without its newline that does not parse
    is a record not yet complete and is left out."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} does not exist")
    lines = path.read_text(encoding="utf-8").split("\n")  # after the last newline: "" when the file ends in one
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if live and number == len(lines):
                break
            raise DataError(f"{path}:{number}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        missing = [k for k in required if k not in record]
        if missing:
            raise DataError(f"{path}:{number}: a record needs {', '.join(missing)}")
        out.append(record)
    return out


def append_records(path: str | Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Append records, one line each, flushed and synced so a finished line is on disk."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_records(path: str | Path, records: Iterable[Mapping[str, Any]], *, required: Sequence[str] = ()) -> Path:
    """Replace ``path`` atomically with the given records; a record without a ``required`` field is a
    ValueError naming its index, and ``path`` keeps what it held."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for index, record in enumerate(records):
                missing = [k for k in required if k not in record]
                if missing:
                    raise ValueError(f"{path}: record {index} lacks {', '.join(missing)}")
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return path


def finished_keys(path: str | Path, key: str = "id") -> set[Any]:
    """Keys of the complete records already in ``path`` (after repairing its tail)."""
    path = Path(path)
    if not path.is_file():
        return set()
    repair_tail(path)
    return {r[key] for r in read_records(path) if key in r}


def check_setting(path: str | Path, setting: Mapping[str, Any], *, what: str, remedy: str,
                  unrecorded: str = "refuse") -> str:
    """Hold ``path``'s records to one setting, kept in ``<name>.setting.json`` beside it: record it
    when there are no records yet ("recorded"), pass when it matches ("matched"), and raise a
    DataError naming the fields that differ (``remedy`` says what to do). Records without the side
    file (written before it existed) are refused, or with ``unrecorded="adopt"`` given this setting
    ("adopted"), or with ``"skip"`` left as they are ("unrecorded")."""
    path = Path(path)
    side = path.with_name(path.name + ".setting.json")
    setting = json.loads(json.dumps(setting))  # tuples as lists, as they come back from the file
    if side.is_file():
        found = json.loads(side.read_text())
        if found == setting:
            return "matched"
        changed = sorted(k for k in set(found) | set(setting) if found.get(k) != setting.get(k))
        raise DataError(f"{path} holds {what} of another setting ({', '.join(changed)} differ: "
                        f"{ {k: found.get(k) for k in changed} } there, { {k: setting.get(k) for k in changed} } "
                        f"now); {remedy}")
    if finished_keys(path):
        if unrecorded == "skip":
            return "unrecorded"
        if unrecorded != "adopt":
            raise DataError(f"{path} holds {what} but no {side.name} saying what made them; {remedy}")
        status = "adopted"
    else:
        status = "recorded"
    if unrecorded != "skip":
        side.parent.mkdir(parents=True, exist_ok=True)
        side.write_text(json.dumps(setting, indent=2) + "\n")
    return status
