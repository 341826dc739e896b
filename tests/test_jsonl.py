"""JSONL files (``jaxdebate.jsonl``): what a kill leaves behind, and errors that name the file and line."""

import pytest

from jaxdebate import jsonl
from jaxdebate.errors import DataError


def test_partial_last_line_is_detected_and_dropped(tmp):
    path = tmp / "r.jsonl"
    jsonl.append_records(path, [{"id": "a", "x": 1}, {"id": "b", "x": 2}])
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"id": "c", "x"')  # killed mid-write, no newline
    assert jsonl.finished_keys(path) == {"a", "b"}
    assert path.read_bytes() == whole
    with open(path, "ab") as f:
        f.write(b'{"id": "c", "x": \n')  # cut, yet ends in a newline
    assert jsonl.repair_tail(path) > 0 and path.read_bytes() == whole
    assert jsonl.repair_tail(path) == 0
    jsonl.append_records(path, [{"id": "c", "x": 3}])
    assert [r["id"] for r in jsonl.read_records(path)] == ["a", "b", "c"]


def test_malformed_line_in_the_middle_names_file_and_line(tmp):
    path = tmp / "bad.jsonl"
    path.write_text('{"id": 1}\nnot json\n{"id": 2}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2"):
        jsonl.read_records(path)
    with pytest.raises(DataError, match="does not exist"):
        jsonl.read_records(tmp / "missing.jsonl")


def test_line_numbers_count_blank_lines_and_required_fields_are_named(tmp):
    path = tmp / "rows.jsonl"
    path.write_text('{"id": 1, "set": "a"}\n\n\n[1, 2]\n')
    with pytest.raises(DataError, match=r"rows\.jsonl:4: expected a JSON object, got list"):
        jsonl.read_records(path)
    path.write_text('{"id": 1, "set": "a"}\n\n{"id": 2}\n')
    assert len(jsonl.read_records(path)) == 2
    with pytest.raises(DataError, match=r"rows\.jsonl:3: a record needs set$"):
        jsonl.read_records(path, required=("id", "set"))


def test_a_live_file_leaves_out_only_a_cut_last_line(tmp):
    """A live run's metrics: the writer may be mid-line. Only the unterminated last line may be cut;
    a whole record without its newline still counts, and a bad line before the end is an error."""
    path = tmp / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "x": [1,')
    assert jsonl.read_records(path, live=True) == [{"step": 1}]
    with pytest.raises(DataError, match=r"metrics\.jsonl:2"):
        jsonl.read_records(path)
    path.write_text('{"step": 1}\n{"step": 2}')
    assert [r["step"] for r in jsonl.read_records(path, live=True)] == [1, 2]
    path.write_text('{"step": 1}\n{"step": \n{"step": 3}\n')
    with pytest.raises(DataError, match=r"metrics\.jsonl:2"):
        jsonl.read_records(path, live=True)


def test_write_records_replaces_the_file_whole(tmp):
    path = tmp / "out" / "rows.jsonl"
    jsonl.write_records(path, [{"id": "a", "text": "naïve"}, {"id": "b"}])
    jsonl.write_records(path, [{"id": "c"}])
    assert jsonl.read_records(path) == [{"id": "c"}]
    assert not list(path.parent.glob("*.tmp"))


def test_write_records_refuses_a_record_without_a_required_field_and_keeps_the_file(tmp):
    path = tmp / "rows.jsonl"
    jsonl.write_records(path, [{"id": "a", "n": 1}], required=("id", "n"))
    with pytest.raises(ValueError, match=r"rows\.jsonl: record 2 lacks n"):
        jsonl.write_records(path, ({"id": k, "n": 1} if k != "c" else {"id": k} for k in "abc"), required=("id", "n"))
    assert jsonl.read_records(path) == [{"id": "a", "n": 1}]
    assert not list(tmp.glob("*.tmp"))
