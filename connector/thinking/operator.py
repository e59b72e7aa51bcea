"""The operator's model: an OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp's
server, LM Studio, Ollama's ``/v1``) reached through the official ``openai`` client library.

The endpoint is trusted with nothing (docs/thinking.md, "Costs are bounded"): one attempt per call
(no retries that would multiply the wait); one deadline for the whole call, so a model trickling
its answer a byte at a time is cut off like a silent one; a bound on the answer's bytes, read as
they arrive; a bound on the calls running at once, in all and per user (one more is answered
"busy" at once rather than queued); and the answer parsed here, strictly, so that any malformed
body (not JSON, nested too deep, another shape, a lone surrogate) is a `ModelError` with the
reason, which every tool turns into its documented fallback. With ``local_only`` the endpoint's
host must resolve to loopback or private addresses, checked when built and again before each
call. The API key goes only into the ``Authorization`` header the library sends; it is never
logged nor put in an error message.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import openai

from common.textsafety import has_lone_surrogate
from connector.thinking.locality import require_local, require_local_async
from connector.thinking.source import ModelAnswer, ModelError

log = logging.getLogger("connector.thinking")

# Servers without keys (Ollama, llama.cpp) ignore the header; the library insists on some value.
NO_KEY = "not-needed"
SOURCE = "operator"
# The answer's body may hold this much beside its text, plus ANSWER_BYTES_PER_TOKEN per output token
# asked for: a token is a few characters, at most 12 bytes JSON-escaped (two "\\uXXXX" halves).
ANSWER_BASE_BYTES = 64 * 1024
ANSWER_BYTES_PER_TOKEN = 16


@dataclass(frozen=True)
class OperatorConfig:
    """Where the operator's model is and how long, how much and how often it may answer."""

    url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    local_only: bool = False
    timeout_s: float = 60.0
    max_tokens: int = 4096
    max_calls: int = 4  # at once in this process, in all
    max_calls_per_user: int = 1  # at once in this process, per user


def answer_bytes(max_tokens: int) -> int:
    """The largest response body accepted for an answer of ``max_tokens`` output tokens."""
    return ANSWER_BASE_BYTES + ANSWER_BYTES_PER_TOKEN * max_tokens


class CallSlots:
    """How many model calls run at once, in all and per user; taking one more raises `ModelError` ("busy")."""

    def __init__(self, total: int, per_user: int) -> None:
        self.total = total
        self.per_user = per_user
        self._running: Counter[str] = Counter()

    @contextmanager
    def taken(self, user: str) -> Iterator[None]:
        """Hold one slot for ``user`` for the duration of a call (no await in between: no lock needed)."""
        if self._running[user] >= self.per_user:
            raise ModelError(
                f"The operator's model is busy: you already have {self.per_user} model "
                f"call{'s' if self.per_user != 1 else ''} running (CONNECTOR_MODEL_MAX_CALLS_PER_USER)."
            )
        if self._running.total() >= self.total:
            raise ModelError(
                f"The operator's model is busy: {self.total} model calls are running "
                "(CONNECTOR_MODEL_MAX_CALLS)."
            )
        self._running[user] += 1
        try:
            yield
        finally:
            self._running[user] -= 1
            if self._running[user] <= 0:
                del self._running[user]


def completion_text(body: bytes) -> tuple[str, str | None]:
    """The answer's text and finish reason from a chat-completions response body; `ModelError` naming what
    is wrong with anything else."""
    try:
        data: Any = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ModelError("The operator's model gave an unusable answer (not UTF-8).") from None
    except RecursionError:
        raise ModelError("The operator's model gave an unusable answer (JSON nested too deep).") from None
    except ValueError:
        raise ModelError("The operator's model gave an unusable answer (not JSON).") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise ModelError("The operator's model answered with no text.")
    if has_lone_surrogate(text):  # valid JSON, but no text that could be sent on
        raise ModelError("The operator's model gave an unusable answer (text that is not valid Unicode).")
    finish = choice.get("finish_reason")
    return text, finish if isinstance(finish, str) else None


class OperatorModel:
    """A `ModelSource` over one OpenAI-compatible endpoint."""

    def __init__(self, config: OperatorConfig) -> None:
        if config.local_only:
            require_local(config.url)  # refuse at start-up, with the reason
        self.config = config
        self.slots = CallSlots(config.max_calls, config.max_calls_per_user)
        self._client = openai.AsyncOpenAI(
            base_url=config.url,
            api_key=config.api_key or NO_KEY,
            timeout=config.timeout_s,
            max_retries=0,
        )

    async def complete(self, system: str, user: str, *, max_tokens: int, caller: str = "") -> ModelAnswer:
        """One chat completion (temperature 0) for ``caller`` (the account), its output within ``max_tokens``
        and the configured bound, the whole call within the timeout."""
        bound = max(1, min(max_tokens, self.config.max_tokens))
        with self.slots.taken(caller):
            try:
                async with asyncio.timeout(self.config.timeout_s):
                    body = await self._call(system, user, bound)
            except TimeoutError:
                raise ModelError(
                    f"The operator's model did not answer within {self.config.timeout_s:g} seconds "
                    "(CONNECTOR_MODEL_TIMEOUT_S)."
                ) from None
        text, finish = completion_text(body)
        return ModelAnswer(text=text, source=SOURCE, model=self.config.model, truncated=finish == "length")

    async def _call(self, system: str, user: str, bound: int) -> bytes:
        """The response body, read as it arrives and refused beyond `answer_bytes`."""
        if self.config.local_only:
            await require_local_async(self.config.url)
        limit = answer_bytes(bound)
        try:
            async with self._client.chat.completions.with_streaming_response.create(
                model=self.config.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                max_tokens=bound,
                temperature=0,
            ) as response:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise ModelError(_too_long(limit))
                body = bytearray()
                async for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise ModelError(_too_long(limit))
                return bytes(body)
        except openai.APITimeoutError:
            raise TimeoutError from None  # the whole call's deadline says it
        except openai.APIConnectionError:
            raise ModelError("The operator's model could not be reached (connection failed).") from None
        except openai.APIStatusError as exc:
            raise ModelError(f"The operator's model answered HTTP {exc.status_code}.") from None
        except openai.OpenAIError:
            # No detail (a message could echo a header), and no Python class name: people read this.
            raise ModelError("The operator's model gave an answer the connector could not read.") from None


def _too_long(limit: int) -> str:
    return f"The operator's model answered more than {limit:,} bytes; the answer was not read further."
