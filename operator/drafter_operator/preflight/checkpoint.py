"""What a checkpoint directory holds, read cheaply: config.json, safetensors headers, tokenizer files."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drafter_operator.preflight.safetensors import SafetensorsError, TensorInfo, checkpoint_tensors

TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json", "tokenizer.model", "tiktoken.model", "vocab.json", "merges.txt", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json",
)
OTHER_WEIGHT_SUFFIXES: tuple[str, ...] = (".bin", ".pt", ".pth", ".ckpt")


@dataclass(frozen=True)
class TokenizerInfo:
    files: tuple[str, ...]
    size: int | None  # ids tokenizer.json defines (highest id + 1); None without tokenizer.json
    vocab_digest: str | None  # sha256 over the token -> id pairs (vocabulary and added tokens)
    file_digests: dict[str, str]
    chat_template_digest: str | None


@dataclass
class Checkpoint:
    path: str
    config: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)  # unreadable config or weight headers
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    weight_files: list[str] = field(default_factory=list)  # safetensors files read
    other_weights: list[str] = field(default_factory=list)  # .bin/.pt files (not read)
    tokenizer: TokenizerInfo | None = None

    @property
    def exists(self) -> bool:
        return os.path.isdir(self.path)

    def text_config(self) -> dict[str, Any]:
        """The language model's fields (multimodal configs nest them under text_config)."""
        config = self.config or {}
        text = config.get("text_config")
        if isinstance(text, dict) and "hidden_size" not in config:
            return {**config, **text}
        return config

    def tensor(self, *names: str) -> TensorInfo | None:
        for name in names:
            if name in self.tensors:
                return self.tensors[name]
        return None

    def tensors_ending(self, suffix: str) -> list[TensorInfo]:
        return [t for n, t in sorted(self.tensors.items()) if n == suffix or n.endswith("." + suffix)]


def load_checkpoint(path: str | os.PathLike, read_weights: bool = True) -> Checkpoint:
    """Read a checkpoint directory; problems are recorded in ``errors``, never raised."""
    ckpt = Checkpoint(path=str(path))
    directory = Path(path)
    if not directory.is_dir():
        ckpt.errors.append(f"{path} is not a directory")
        return ckpt
    config_path = directory / "config.json"
    if not config_path.is_file():
        ckpt.errors.append(f"{config_path} is missing")
    else:
        try:
            config = json.loads(config_path.read_text())
            if not isinstance(config, dict):
                raise ValueError("not a JSON object")
            ckpt.config = config
        except (OSError, ValueError) as exc:
            ckpt.errors.append(f"{config_path} is not readable JSON ({exc})")
    if read_weights:
        try:
            ckpt.tensors, ckpt.weight_files = checkpoint_tensors(directory)
        except (OSError, SafetensorsError) as exc:
            ckpt.errors.append(str(exc))
        ckpt.other_weights = sorted(p.name for p in directory.iterdir()
                                    if p.is_file() and p.name.endswith(OTHER_WEIGHT_SUFFIXES))
    ckpt.tokenizer = read_tokenizer(directory)
    return ckpt


def read_tokenizer(directory: Path) -> TokenizerInfo | None:
    files = tuple(name for name in TOKENIZER_FILES if (directory / name).is_file())
    if not files:
        return None
    digests = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in files}
    size = vocab_digest = template = None
    if "tokenizer.json" in files:
        try:
            data = json.loads((directory / "tokenizer.json").read_text())
            pairs = _token_ids(data)
            if pairs:
                size = max(i for _, i in pairs) + 1
                text = json.dumps(sorted(pairs), separators=(",", ":"))
                vocab_digest = hashlib.sha256(text.encode()).hexdigest()
        except (OSError, ValueError, TypeError, AttributeError):
            pass
    if "tokenizer_config.json" in files:
        try:
            chat = json.loads((directory / "tokenizer_config.json").read_text()).get("chat_template")
            if chat is not None:
                template = hashlib.sha256(json.dumps(chat, sort_keys=True).encode()).hexdigest()
        except (OSError, ValueError, AttributeError):
            pass
    if template is None and (directory / "chat_template.jinja").is_file():
        template = hashlib.sha256((directory / "chat_template.jinja").read_bytes()).hexdigest()
    return TokenizerInfo(files, size, vocab_digest, digests, template)


def _token_ids(data: dict) -> list[tuple[str, int]]:
    """(token, id) pairs of a tokenizers JSON: the model's vocabulary (a dict for BPE/WordPiece/WordLevel,
    a list of [piece, score] for Unigram) and the added tokens."""
    pairs: list[tuple[str, int]] = []
    vocab = (data.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        pairs.extend((str(k), int(v)) for k, v in vocab.items())
    elif isinstance(vocab, list):
        pairs.extend((str(entry[0]), i) for i, entry in enumerate(vocab))
    for token in data.get("added_tokens") or []:
        pairs.append((str(token["content"]), int(token["id"])))
    return pairs
