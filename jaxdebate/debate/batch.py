"""What a batch of debates produces: group arrays, training turns, readable transcripts."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxdebate.data.items import Item
from jaxdebate.debate.classes import plurality


@dataclasses.dataclass(frozen=True)
class Turn:
    """One played turn (rollout g, agent a, round r of item b): one training sample.

    ``prompt_ids`` is the full prompt (chat template applied), ``completion_ids``/``logprobs`` come
    from the sampler; ``answer`` is the extracted final answer (None: none stated)."""

    index: tuple[int, int, int, int]
    item_id: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    truncated: bool
    weight_version: int
    text: str
    answer: str | None
    trimmed: int = 0


def plurality_votes(votes: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Plurality class per round, ``[..., A, R] -> [..., R]`` (DESIGN §3 tie rule; -1: no vote)."""
    masked = np.where(active, votes, -1)
    flat = masked.reshape(-1, *masked.shape[-2:])
    out = np.array([[plurality(row[:, r].tolist()) for r in range(row.shape[1])] for row in flat], dtype=np.int32)
    return out.reshape(masked.shape[:-2] + (masked.shape[-1],))


@dataclasses.dataclass(frozen=True)
class DebateBatch:
    """Debates of ``B`` items × ``G`` rollouts with up to ``A`` agents and ``R`` rounds.

    Arrays (DESIGN §4): ``correct`` f32 [B,G,A,R], ``votes`` i32 [B,G,A,R] (answer-class ids within
    item b's group, -1 = no answer), ``gold`` i32 [B] (-1: no sampled answer correct), ``active`` bool
    [B,G,A,R] (played; False after an early stop and for agents/rounds an item's env does not have).
    ``turns`` lists every played turn; ``classes[b][k]`` is the first answer of class k of item b.
    """

    items: tuple[Item, ...]
    env_names: tuple[str, ...]
    correct: np.ndarray
    votes: np.ndarray
    gold: np.ndarray
    active: np.ndarray
    turns: tuple[Turn, ...]
    classes: tuple[tuple[str, ...], ...]
    stats: Mapping[str, Any]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return tuple(self.correct.shape)  # type: ignore[return-value]

    def truncated(self) -> np.ndarray:
        """bool [B, G, A, R]: the turn's completion hit max_tokens (False for turns not played)."""
        mask = np.zeros(self.active.shape, dtype=bool)
        for turn in self.turns:
            mask[turn.index] = turn.truncated
        return mask

    def last_rounds(self) -> np.ndarray:
        """Index of each rollout's last played round, i32 [B, G] (-1 if none)."""
        played = self.active.any(axis=2)
        last = played.shape[-1] - 1 - np.argmax(played[..., ::-1], axis=-1)
        return np.where(played.any(axis=-1), last, -1).astype(np.int32)

    def debate_answers(self) -> np.ndarray:
        """Class id of each debate's answer (plurality of its last played round), i32 [B, G]."""
        per_round = plurality_votes(self.votes, self.active)
        last = self.last_rounds()
        picked = np.take_along_axis(per_round, np.maximum(last, 0)[..., None], axis=-1)[..., 0]
        return np.where(last >= 0, picked, -1).astype(np.int32)

    def debate_correct(self) -> np.ndarray:
        """1.0 where the debate's answer is the gold class, f32 [B, G]."""
        answers = self.debate_answers()
        return ((answers == self.gold[:, None]) & (self.gold[:, None] >= 0)).astype(np.float32)

    def summary(self) -> dict[str, float]:
        """Accuracies over played turns: all, per round, per agent, first-round majority, debate."""
        act = self.active
        first = plurality_votes(self.votes[..., :1], act[..., :1])[..., 0]
        first_ok = (first == self.gold[:, None]) & (self.gold[:, None] >= 0)

        def mean(mask: np.ndarray) -> float:
            return float(self.correct[mask].mean()) if mask.any() else float("nan")

        out = {"accuracy": mean(act), "debate_accuracy": float(self.debate_correct().mean()),
               "first_round_majority_accuracy": float(first_ok.mean())}
        for r in range(act.shape[3]):
            out[f"accuracy_round_{r}"] = mean(act & (np.arange(act.shape[3]) == r))
        for a in range(act.shape[2]):
            out[f"accuracy_agent_{a}"] = mean(act & (np.arange(act.shape[2]) == a)[:, None])
        return out

    def transcript(self, b: int, g: int = 0, *, max_chars: int | None = 1200) -> str:
        """A readable account of rollout g of item b: every turn's answer, votes, plurality, verdict."""
        item = self.items[b]
        by_index = {t.index: t for t in self.turns if t.index[0] == b and t.index[1] == g}
        classes = self.classes[b]
        lines = [f"=== item {item.id}  env={self.env_names[b]}  rollout {g}",
                 f"problem: {item.problem.strip()}", f"gold: {item.answer}"
                 + (f"  (class {self.gold[b]})" if self.gold[b] >= 0 else "  (no sampled answer is correct)")]
        _, _, num_agents, num_rounds = self.shape
        for r in range(num_rounds):
            if not self.active[b, g, :, r].any():
                continue
            lines.append(f"--- round {r + 1}")
            for a in range(num_agents):
                turn = by_index.get((b, g, a, r))
                if turn is None:
                    continue
                text = turn.text.strip()
                if max_chars is not None and len(text) > max_chars:
                    text = f"[… {len(text) - max_chars} chars not shown …]\n" + text[-max_chars:]
                flags = [f for f, on in (("truncated", turn.truncated), (f"prompt trimmed ×{turn.trimmed}", turn.trimmed)) if on]
                verdict = "correct" if self.correct[b, g, a, r] else "wrong"
                lines.append(f"[agent {a + 1}] answer={turn.answer!r} class={self.votes[b, g, a, r]} {verdict}"
                             + (f" ({', '.join(flags)})" if flags else ""))
                lines.append("    " + text.replace("\n", "\n    "))
            votes = [int(v) if self.active[b, g, a, r] else -1 for a, v in enumerate(self.votes[b, g, :, r])]
            winner = plurality(votes)
            shown = classes[winner] if winner >= 0 else None
            lines.append(f"votes {votes} -> plurality class {winner} ({shown!r})")
        answer = int(self.debate_answers()[b, g])
        verdict = "CORRECT" if self.debate_correct()[b, g] else "WRONG"
        lines.append(f"debate answer: {classes[answer] if answer >= 0 else None!r} -> {verdict}")
        return "\n".join(lines)

    def transcripts(self, *, max_chars: int | None = 1200) -> list[str]:
        B, G = self.shape[:2]
        return [self.transcript(b, g, max_chars=max_chars) for b in range(B) for g in range(G)]


