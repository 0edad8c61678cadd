"""Container image references."""

from __future__ import annotations

#: The trainer image (drafter-operator plus SpecForge, speculators and their engines): what stage Jobs run.
TRAINER_REPOSITORY = "drafter-dev/drafter-trainer"


def image_repository(image: str) -> str:
    """`docker.io/vllm/vllm-openai:v0.33.0@sha256:..` -> `vllm/vllm-openai`."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # drop the registry host
    return "/".join(parts)
