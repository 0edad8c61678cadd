"""Contract tier: clients load the emulator's tokenizer with transformers and count what it counts.

transformers' ``AutoTokenizer.from_pretrained(<drafter_operator/data/tokenizer>)`` (the engines'
environment: transformers 5.19.0) must give the same ids for plain text and the same rendered chat
template (``apply_chat_template(..., add_generation_prompt=True)``) as ``drafter_testbed/emulator/tokenizer.py``.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from drafter_testbed.emulator.tokenizer import TOKENIZER_DIR, shipped

pytestmark = pytest.mark.contract

TEXTS = ["Hello there, how are you?", " the model drafts tokens", "Kubernetes: 42 GPUs\n\n```py\nx = 1\n```",
         "émulateur, 速度, 🚀", ""]
CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Explain speculative decoding."},
     {"role": "assistant", "content": "A drafter proposes, the target verifies."}, {"role": "user", "content": "k?"}],
]

SCRIPT = """
import json, sys
from transformers import AutoTokenizer
case = json.loads(sys.stdin.read())
t = AutoTokenizer.from_pretrained(case["dir"])
print(json.dumps({
    "class": type(t).__name__,
    "ids": [t.encode(text, add_special_tokens=True) for text in case["texts"]],
    "chats": [t.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in case["conversations"]],
    "eos": t.eos_token,
}))
"""


def test_autotokenizer_agrees_with_the_emulator(engine_python):
    python = engine_python
    case = {"dir": str(TOKENIZER_DIR), "texts": TEXTS, "conversations": CONVERSATIONS}
    proc = subprocess.run([python, "-c", SCRIPT], input=json.dumps(case), capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    real = json.loads(proc.stdout.strip().splitlines()[-1])
    tok = shipped()
    assert real["ids"] == [tok.encode(text) for text in TEXTS]
    assert real["chats"] == [tok.apply_chat_template(m) for m in CONVERSATIONS]
    assert real["eos"] == tok.eos_token
