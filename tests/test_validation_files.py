"""A run's per-item validation files (``jaxdebate.validation_files``): the trainer's writer and the
analysis' reader agree on the path and the fields, a rewrite replaces a step whole, steps sort as numbers."""

import pytest

from jaxdebate import validation_files
from jaxdebate.errors import DataError


def _row(i, **extra):
    return {"id": f"q{i}", "set": "heldout", "mode": "debate", "answer": str(i), "correct_final": i % 2 == 0, **extra}


def test_written_rows_read_back_and_a_rewrite_replaces_the_step(tmp):
    path = validation_files.write(tmp, 3, [_row(1, gold="1"), _row(2)])
    assert path == tmp / "validation" / "step_3.jsonl" == validation_files.step_path(tmp, 3)
    assert validation_files.read(path) == [_row(1, gold="1"), _row(2)]
    validation_files.write(tmp, 3, [_row(5)])  # a resumed run validates its step again
    assert validation_files.read(path) == [_row(5)]
    assert not list((tmp / "validation").glob("*.tmp"))


def test_a_row_without_a_field_is_refused_and_the_step_keeps_its_file(tmp):
    validation_files.write(tmp, 1, [_row(1)])
    bad = _row(2)
    del bad["correct_final"], bad["mode"]
    with pytest.raises(ValueError, match="step_1.jsonl: record 1 lacks mode, correct_final"):
        validation_files.write(tmp, 1, [_row(1), bad])
    assert validation_files.read(validation_files.step_path(tmp, 1)) == [_row(1)]


def test_a_damaged_file_names_its_line(tmp):
    path = validation_files.write(tmp, 2, [_row(1), _row(2)])
    with path.open("a") as f:
        f.write('{"id": "q3", "set": "heldout", "mode": "debate"}\n')
    with pytest.raises(DataError, match=r"step_2\.jsonl:3: a record needs answer, correct_final"):
        validation_files.read(path)


def test_steps_are_ordered_as_numbers_and_other_files_are_ignored(tmp):
    assert validation_files.steps(tmp) == []  # a run from before per-item validation
    for step in (10, 2, 0):
        validation_files.write(tmp, step, [_row(step)])
    (tmp / "validation" / "step_last.jsonl").write_text("")
    (tmp / "validation" / "step_4.jsonl.tmp").write_text("")
    assert validation_files.steps(tmp) == [(s, validation_files.step_path(tmp, s)) for s in (0, 2, 10)]
