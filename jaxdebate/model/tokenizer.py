"""Tokenizer with the model's chat template, and left-padded batch encoding.

A thin shell around a HF ``transformers`` fast tokenizer, loaded from the same source strings as the
weights (see :mod:`jaxdebate.model.sources`). GGUF tokenizers are converted once and cached, because
converting the GGUF vocabulary takes ~15 s.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from jaxdebate.errors import WeightsError
from jaxdebate.model import sources

Message = Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Batch:
    """Left-padded token ids ``[B, T]`` and their validity mask (``True`` on real tokens)."""

    ids: np.ndarray
    mask: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return self.mask.sum(axis=1)


class Tokenizer:
    """Encode/decode text and chat conversations for one model."""

    def __init__(self, hf_tokenizer) -> None:
        self.hf = hf_tokenizer
        if self.hf.pad_token_id is None:
            self.hf.pad_token = self.hf.eos_token
        if not getattr(self.hf, "chat_template", None):
            raise WeightsError("the tokenizer has no chat template; jaxdebate prompts need one")

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    @property
    def eos_id(self) -> int:
        return int(self.hf.eos_token_id)

    @property
    def pad_id(self) -> int:
        return int(self.hf.pad_token_id)

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Token ids that end a completion (EOS; for chat models also the end-of-turn token)."""
        ids = {self.eos_id}
        for tok in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
            tid = self.hf.convert_tokens_to_ids(tok)
            if isinstance(tid, int) and tid != self.hf.unk_token_id and tid >= 0:
                ids.add(int(tid))
        return tuple(sorted(ids))

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text, without special tokens added."""
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def chat_text(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        """The chat template rendered as text (what the model sees)."""
        return self.hf.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def encode_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a conversation rendered with the chat template."""
        return self.encode(self.chat_text(messages, add_generation_prompt))

    def pad_left(self, sequences: Sequence[Sequence[int]], length: int | None = None) -> Batch:
        """Left-pad token-id sequences to a common ``length`` (default: the longest)."""
        longest = max((len(s) for s in sequences), default=0)
        length = longest if length is None else length
        if length < longest:
            raise ValueError(f"pad length {length} is shorter than the longest sequence ({longest})")
        ids = np.full((len(sequences), length), self.pad_id, dtype=np.int32)
        mask = np.zeros((len(sequences), length), dtype=bool)
        for i, seq in enumerate(sequences):
            if len(seq):
                ids[i, length - len(seq):] = np.asarray(seq, dtype=np.int32)
                mask[i, length - len(seq):] = True
        return Batch(ids, mask)

    def batch_encode(self, texts: Sequence[str], length: int | None = None) -> Batch:
        """Encode texts and left-pad them into one batch."""
        return self.pad_left([self.encode(t) for t in texts], length)

    def save(self, directory: str | Path) -> None:
        """Write the tokenizer files (tokenizer.json, tokenizer_config.json, chat template)."""
        self.hf.save_pretrained(str(directory))


def _from_dir(path: Path) -> Tokenizer:
    from transformers import AutoTokenizer

    try:
        return Tokenizer(AutoTokenizer.from_pretrained(str(path)))
    except (OSError, ValueError) as e:
        raise WeightsError(f"no usable tokenizer in {path}: {e}") from e


@functools.lru_cache(maxsize=8)
def _from_gguf(path: Path) -> Tokenizer:
    cached = sources.cache_dir() / f"tokenizer-{sources.file_fingerprint(path)}"
    if (cached / "tokenizer.json").is_file():
        return _from_dir(cached)
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as e:  # noqa: BLE001 - the GGUF reader raises many types
        raise WeightsError(f"cannot read the tokenizer from GGUF file {path}: {e}") from e
    tmp = Path(tempfile.mkdtemp(dir=cached.parent, prefix=cached.name + "."))
    hf.save_pretrained(str(tmp))
    try:
        tmp.rename(cached)
    except OSError:  # another process cached it first
        shutil.rmtree(tmp, ignore_errors=True)
    return Tokenizer(hf)


def load_tokenizer(source: str) -> Tokenizer:
    """The tokenizer for a model source string (``tiny`` models use SmolLM2's tokenizer)."""
    src = sources.parse_source(source)
    if src.kind == "gguf":
        return _from_gguf(src.path)
    if src.kind == "tiny":
        return _from_gguf(sources.bundled_gguf_path())
    if src.kind == "hub":
        return _from_dir(sources.hub_snapshot(src.text))
    return _from_dir(src.path)
