"""The coherence report's per-epoch curves (the rest of the report runs in test_pipeline.py's v2 runs)."""

from __future__ import annotations

import pytest

from jaxdebate.coherence.report import _curves


def test_curves_average_over_the_runs_that_reached_an_epoch_and_skip_undefined_points():
    runs = [{"epochs": [{"epoch": 0, "heldout/accuracy": 0.2, "heldout_pairs/accuracy": 0.0},
                        {"epoch": 1, "heldout/accuracy": 0.5, "heldout_pairs/accuracy": 0.8},
                        {"epoch": 2, "heldout/accuracy": 0.4, "heldout_pairs/accuracy": 0.9}]},
            {"epochs": [{"epoch": 0, "heldout/accuracy": 0.2, "heldout_pairs/accuracy": 0.0},
                        {"epoch": 1, "heldout/accuracy": 0.7, "heldout_pairs/accuracy": 0.6}]}]
    curves = _curves(runs)
    assert curves["heldout/accuracy"] == pytest.approx({"0": 0.2, "1": 0.6, "2": 0.4})  # epoch 2: one run
    # at epoch 0 the policy is the reference, every margin 0: no pair accuracy to draw there
    assert curves["heldout_pairs/accuracy"] == pytest.approx({"1": 0.7, "2": 0.9})
    assert "heldout_pairs/margin" not in curves
