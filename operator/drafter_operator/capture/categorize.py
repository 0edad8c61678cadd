"""The traffic category of a request, inferred from the request alone.

The operator tags captured prompts with a category this way (capture/dataset.py: a retraining's held-out
prompts, which a benchmark measures by category): an engine is never told a prompt's kind of traffic, so the
request is all there is to read. The testbed's engine emulator uses the same classifier to pick a request's
acceptance (docs/emulator-model.md).

Deterministic, first match wins:

1. ``tools`` in the request (function calling) -> toolCalls;
2. a prompt of at least ``LONG_CONTEXT_CHARS`` characters -> longContext (at that length the context, not
   its kind, is what a drafter trained on shorter samples struggles with);
3. mostly non-Latin letters, or Latin-script text whose function words are those of another language than
   English -> nonEnglish;
4. tool definitions or calls written into the prompt (JSON Schema ``"parameters"``, ``"arguments"``, ...)
   -> toolCalls;
5. code: a fenced block, lines that read as code, or programming vocabulary; math: formula notation or
   mathematical vocabulary; writing: requests for prose (an essay, a story, a chapter, a summary);
6. anything else -> chat.

The vocabulary scores count matches per word of the prompt, so a long chat that mentions one function is
still chat. The categories are ``traffic_categories.py``'s; every tag of the benchmark's built-in prompt set is
what this gives for its text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from drafter_operator.traffic_categories import TrafficCategory

#: A prompt this long (about 2,000 tokens of English) is long context, whatever it is about.
LONG_CONTEXT_CHARS = 8000
#: Share of letters outside ASCII above which a text is not English (CJK, Cyrillic, Greek, Arabic, ...).
NON_LATIN_SHARE = 0.3

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?", re.UNICODE)
_ENGLISH_FUNCTION_WORDS = frozenset(
    "the and of to a in is that for it with as on be this are you your i my we our or not can what how".split())
_OTHER_FUNCTION_WORDS = frozenset(
    # German, French, Spanish, Italian, Portuguese, Dutch: articles, conjunctions, common prepositions
    ("der die das und ist nicht ich sie ein eine mit für auf den dem zu von wie bitte "
     "le la les des et est une pour dans que qui sur pas vous je du au aux avec "
     "el los las y es por para con una del al pero muy cómo qué "
     "il lo gli che di per non sono della nel una "
     "os as um uma não com do da em para "
     "het een en van ik je niet dat met voor op").split())
_TOOL_MARKERS = (re.compile(r'"parameters"\s*:\s*\{'), re.compile(r'"arguments"\s*:'),
                 re.compile(r'"type"\s*:\s*"function"'), re.compile(r'"tool"\s*:'),
                 re.compile(r'"tool_calls"\s*:'), re.compile(r'"required"\s*:\s*\['))
_FENCE = re.compile(r"^\s*```", re.MULTILINE)
_CODE_LINE = re.compile(
    r"^\s*(def |class |import |from \S+ import |return\b|if .*:\s*$|for .* in .*:\s*$|function\b|const |let |"
    r"public |private |#include|SELECT\b|INSERT\b|CREATE TABLE|}\s*$|.*;\s*$|.*=>)", re.MULTILINE)
_CODE_WORDS = frozenset(
    ("python javascript typescript java rust golang sql postgresql function functions module modules class "
     "method code coding program compile compiler debug bug refactor asyncio pytest jest test tests unit "
     "typed type hints docstrings api endpoint http json query queries index schema repository script "
     "variable variables exception signature implementation implement").split())
_MATH_NOTATION = re.compile(r"(\^|\\frac|\\sum|\\int|[=<>]=?\s*-?\d|\d\s*[+*/]\s*\d|[∑∫√≤≥≈π]|\b[a-z]_\{?\w+\}?)")
_MATH_WORDS = frozenset(
    ("prove proof derive expression evaluate compute calculate calculation formula equation equations theorem "
     "lemma probability variance mean distribution integer integers sum limit root roots approximate "
     "approximation numerically solve induction closed form sensitivity estimate minimum maximum units "
     "expected independent percent linearly").split())
_WRITING_WORDS = frozenset(
    ("essay story chapter poem narrative prose tone voice readers reader paragraph summarise summarize summary "
     "bullet guide sentences title write rewrite draft letter article").split())
#: Vocabulary matches per word of the prompt above which the prompt is of that kind.
_MIN_DENSITY = {"code": 0.03, "math": 0.015, "writing": 0.015}


def request_text(body: Mapping[str, object]) -> str:
    """The text of a chat request's messages, of a completion's prompt, or of SGLang's native ``text`` (token
    ids have none)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts: list[str] = []
        for message in messages:
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):  # content parts: keep the text ones
                parts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        return "\n".join(parts)
    prompt = body.get("prompt", body.get("text"))
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    return ""


def _non_english(text: str, words: list[str]) -> bool:
    letters = [c for c in text if c.isalpha()]
    if letters and sum(not c.isascii() for c in letters) / len(letters) > NON_LATIN_SHARE:
        return True
    lowered = [w.lower() for w in words]
    english = sum(w in _ENGLISH_FUNCTION_WORDS for w in lowered)
    other = sum(w in _OTHER_FUNCTION_WORDS for w in lowered)
    return other > 2 * english and other >= 0.05 * len(lowered)


def _density(words: list[str], vocabulary: frozenset[str]) -> float:
    return sum(w.lower() in vocabulary for w in words) / max(len(words), 1)


def classify_text(text: str, *, tools: bool = False) -> TrafficCategory:
    """The category of a prompt ``text`` (``tools``: the request offered tools)."""
    if tools:
        return "toolCalls"
    if len(text) >= LONG_CONTEXT_CHARS:
        return "longContext"
    words = _WORD.findall(text)
    if _non_english(text, words):
        return "nonEnglish"
    if sum(bool(marker.search(text)) for marker in _TOOL_MARKERS) >= 2:
        return "toolCalls"
    if _FENCE.search(text) or len(_CODE_LINE.findall(text)) >= 3:
        return "code"
    scores = {"code": _density(words, _CODE_WORDS),
              "math": _density(words, _MATH_WORDS) + len(_MATH_NOTATION.findall(text)) / max(len(words), 1),
              "writing": _density(words, _WRITING_WORDS)}
    above = {kind: score / _MIN_DENSITY[kind] for kind, score in scores.items() if score >= _MIN_DENSITY[kind]}
    if above:
        return max(above, key=lambda kind: (above[kind], kind))  # type: ignore[return-value]
    return "chat"


def classify(body: Mapping[str, object]) -> TrafficCategory:
    """The category of an OpenAI-style request body (chat or completion)."""
    return classify_text(request_text(body), tools=bool(body.get("tools")))
