"""Container image references."""

from __future__ import annotations

#: The trainer image (drafter-operator plus SpecForge, speculators and their engines): what stage Jobs run.
TRAINER_REPOSITORY = "drafter-dev/drafter-trainer"


def image_name(image: str) -> str:
    """The reference without its tag and digest: `docker.io/vllm/vllm-openai:v0.33.0@sha256:..` ->
    `docker.io/vllm/vllm-openai`. A `:` before the last `/` is a registry's port, not a tag."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def image_repository(image: str) -> str:
    """`docker.io/vllm/vllm-openai:v0.33.0@sha256:..` -> `vllm/vllm-openai`."""
    parts = image_name(image).split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # drop the registry host
    return "/".join(parts)
