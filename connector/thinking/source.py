"""The model source interface: what `brain_reflect` and `brain_extract` need from a language model.

A source answers one system + user message pair within ``max_tokens`` of output, and
says who wrote the answer. Implementations: `connector.thinking.operator.OperatorModel`
(an OpenAI-compatible chat-completions endpoint). "No model" is simply ``None``: the
tools then return the evidence for the host's own model instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class ModelError(Exception):
    """The model could not answer (refused endpoint, timeout, HTTP error); the message says what happened
    and never carries the API key."""


@dataclass(frozen=True)
class ModelAnswer:
    """One answer: its text, and who wrote it (``source``: "operator"; ``model``: the model's name)."""

    text: str
    source: str
    model: str
    truncated: bool = False  # the output-token bound cut the answer


class ModelSource(Protocol):
    """Something that can write an answer to one prompt."""

    async def complete(self, system: str, user: str, *, max_tokens: int, caller: str = "") -> ModelAnswer:
        """The model's answer for ``caller`` (the account asking); raises `ModelError` on any failure."""
        ...
