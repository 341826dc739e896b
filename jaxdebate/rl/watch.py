"""What the loop watches across steps: updates that were not applied because they were non-finite
(divergence: stop after ``training.nonfinite_patience`` in a row) and stretches of steps without
any update (every group zero-signal or truncated: said once, with the reason)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from jaxdebate.errors import JaxDebateError
from jaxdebate.rl.optim import nonfinite_update


def no_update_reason(metrics: Mapping[str, float]) -> str:
    """Why a step's learner did not update, from its ``train/*`` filter metrics."""
    if not metrics:
        return "no debates were sampled"
    if metrics.get("train/zero_advantage_fraction", 0.0) >= 1.0:
        return "every group's shaped rewards were identical (zero signal)"
    if metrics.get("train/truncated_fraction", 0.0) >= 1.0:
        return "every turn was truncated (sampler.max_new_tokens)"
    if metrics.get("train/n_kept", 0.0) == 0:
        return "the filters kept no turn (zero-signal groups and truncated turns)"
    return "the update was non-finite"


@dataclasses.dataclass
class StepWatch:
    """Counts consecutive non-finite and idle steps; ``observe`` returns lines to print and sets
    ``stop`` (the error to raise once the step is logged) when the run must end."""

    nonfinite_patience: int
    idle_after: int
    nonfinite_run: int = 0
    idle_run: int = 0
    stop: JaxDebateError | None = None

    def observe(self, step: int, metrics: Mapping[str, float], newest_checkpoint: int | None) -> list[str]:
        lines = []
        bad = nonfinite_update(metrics, prefix="learner/")
        self.nonfinite_run = self.nonfinite_run + 1 if bad else 0
        if bad:
            lines.append(f"step {step}: non-finite {bad} (loss={metrics.get('learner/loss')}, "
                         f"grad_norm={metrics.get('learner/grad_norm')}); the update was not applied")
        if self.nonfinite_run >= self.nonfinite_patience:
            kept = ("no checkpoint was written" if newest_checkpoint is None
                    else f"checkpoint {newest_checkpoint} is the newest")
            self.stop = JaxDebateError(
                f"step {step}: non-finite {bad} in {self.nonfinite_run} consecutive update(s) "
                f"(training.nonfinite_patience), none applied; stopping ({kept}; its parameters are "
                f"finite). Lower optimizer.peak_lr before resuming")
        self.idle_run = 0 if metrics.get("learner/updated", 0.0) else self.idle_run + 1
        if self.idle_after and self.idle_run == self.idle_after:
            lines.append(f"step {step}: no update in the last {self.idle_run} steps; this step: "
                         f"{no_update_reason(metrics)}")
        return lines
