"""MetricWriter: JSONL records, TensorBoard event files readable by TensorBoard's reader, truncation."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxdebate.errors import DataError
from jaxdebate.metrics import MetricWriter, read_metrics


def _tb_scalars(directory):
    """Parse the TFRecord event files (length, crc, Event proto, crc) with tensorboardX's protos."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    scalars = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_jsonl_and_tensorboard(tmp_path):
    with MetricWriter(tmp_path, tensorboard=True) as writer:
        writer.write(1, {"train": {"loss": np.float32(0.5), "kl": jnp.array(0.25)}, "bad": float("nan")})
        writer.write(2, {"train": {"loss": 0.375}, "note": "text"})
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["train/loss"] == 0.5 and records[0]["train/kl"] == 0.25
    assert records[0]["bad"] == "nan" and records[1]["note"] == "text"
    scalars = _tb_scalars(tmp_path / "tensorboard")
    assert scalars["train/loss"] == [(1, 0.5), (2, 0.375)]
    assert math.isnan(scalars["bad"][0][1])


def test_truncate_after_drops_steps_to_be_redone(tmp_path):
    with MetricWriter(tmp_path, tensorboard=False) as writer:
        for step in range(1, 5):
            writer.write(step, {"x": step})
    with MetricWriter(tmp_path, tensorboard=False, truncate_after=2) as writer:
        writer.write(3, {"x": 30})
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [(1, 1), (2, 2), (3, 30)]


def test_a_last_line_still_being_written_or_cut_by_a_kill_is_not_a_record(tmp_path):
    """A reader polling a live run's metrics.jsonl once saw part of a long line (CI, test_train_resume);
    a SIGKILL mid-write leaves the same torn tail, which a resume's truncation must get past."""
    with MetricWriter(tmp_path, tensorboard=False) as writer:
        for step in range(1, 4):
            writer.write(step, {"x": step})
    path = tmp_path / "metrics.jsonl"
    whole = path.read_text()
    path.write_text(whole + '{"step": 4, "x": 4, "y": [1, 2')  # the kill landed mid-record
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    with MetricWriter(tmp_path, tensorboard=False, truncate_after=3) as writer:
        writer.write(4, {"x": 40})
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [(1, 1), (2, 2), (3, 3), (4, 40)]
    # an unterminated last record that is whole counts; a malformed line before the end is an error
    path.write_text(whole + '{"step": 4, "x": 4}')
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4]
    lines = whole.splitlines()
    path.write_text("\n".join([lines[0], '{"step": 2, "x": ', lines[2]]) + "\n")
    with pytest.raises(DataError, match=r"metrics.jsonl:2: not valid JSON"):
        read_metrics(tmp_path)
