"""The traffic categories a benchmark prompt may carry: the one vocabulary the API, the benchmark client, the
traffic-mix arithmetic and the emulator's classifier share.

A drafter's acceptance depends on what is generated: code and math repeat names, notation and structure the
drafter predicts well, while open-ended chat and writing leave it more choices to get wrong, and a drafter
trained on English text predicts other languages worst. One published drafter ranges from an acceptance
length of 2.64 on writing to 4.57 on code, so a single figure over mixed prompts says little about any one
kind of traffic.
"""

from __future__ import annotations

from typing import Literal, get_args

TrafficCategory = Literal["code", "math", "chat", "writing", "toolCalls", "longContext", "nonEnglish"]
"""code: writing or reviewing programs; math: calculation and proofs; chat: questions and conversation;
writing: prose such as essays, stories and reports; toolCalls: requests that offer tools (function calling,
JSON arguments); longContext: a long document, transcript or code base to work over; nonEnglish: any of the
above in a language other than English."""

#: Every category, in the order results list them.
TRAFFIC_CATEGORIES: tuple[TrafficCategory, ...] = get_args(TrafficCategory)


def unknown_category_message(value: object, where: str) -> str:
    """What to say about a category outside the vocabulary, naming where it was and the allowed values."""
    return f"{where}: unknown category {value!r}: use one of {', '.join(TRAFFIC_CATEGORIES)} (or leave it out)"
