"""The emulator's tokenizer: the shipped byte-level BPE, loaded once, and its ChatML chat template.

Token counts (``usage.prompt_tokens``, ``/tokenize``, SGLang's ``meta_info.prompt_tokens``) come from
here, as the engines count them: a completion prompt is encoded as given, a chat request is rendered
through the tokenizer's chat template (with the assistant header, like ``add_generation_prompt``) and
the result encoded without adding special tokens (vLLM's chat path does the same). The template is
rendered with the Jinja options transformers' ``apply_chat_template`` uses, so a client that loads the
same directory with ``AutoTokenizer.from_pretrained`` counts the same tokens.

The directory is built by ``emulator/build_tokenizer.py``; ``TOKENIZER_DIR`` is where clients point
``--tokenizer``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# The files ship with the operator (drafter_operator/data/tokenizer: preflight's tiny checkpoints carry
# them too); the emulator serves the same ones, so this is the one place that says where they are.
TOKENIZER_DIR = Path(str(resources.files("drafter_operator.data").joinpath("tokenizer")))


class TemplateError(ValueError):
    """A chat request the template cannot render (the engines answer 400)."""


@dataclass(frozen=True)
class EmulatorTokenizer:
    """Encode, decode and chat-template text with the shipped tokenizer (thread-safe, immutable)."""

    _tokenizer: object
    _template: object
    eos_token: str

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_id(self) -> int:
        return self._tokenizer.token_to_id(self.eos_token)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        # No BOS/EOS post-processing is configured, so add_special_tokens changes nothing; it is kept
        # so that callers state what the engine does.
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """The token strings of ``ids`` (vLLM's ``return_token_strs``), byte-level form."""
        return [self._tokenizer.id_to_token(i) for i in ids]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def is_valid_id(self, token_id: object) -> bool:
        return isinstance(token_id, int) and not isinstance(token_id, bool) and 0 <= token_id < self.vocab_size

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         eos_token=self.eos_token, bos_token="")
        except Exception as exc:  # jinja2 raises many kinds (UndefinedError, TypeError, SecurityError...)
            raise TemplateError(f"the chat template cannot render these messages: {exc}") from None

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> int:
        return len(self.encode(self.apply_chat_template(messages, add_generation_prompt), add_special_tokens=False))


def load(directory: Path = TOKENIZER_DIR) -> EmulatorTokenizer:
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from tokenizers import Tokenizer

    config = json.loads((directory / "tokenizer_config.json").read_text())
    # transformers renders chat templates in this environment with these options.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    template = env.from_string(config["chat_template"])
    return EmulatorTokenizer(Tokenizer.from_file(str(directory / "tokenizer.json")), template, config["eos_token"])


@functools.cache
def shipped() -> EmulatorTokenizer:
    """The shipped tokenizer, loaded on first use (about 20 ms) and shared."""
    return load()
