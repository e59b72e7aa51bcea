"""The operator's model: an OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp's
server, LM Studio, Ollama's ``/v1``) reached through the official ``openai`` client library.

Bounded: one attempt per call (no retries that would multiply the wait), a timeout for the
whole call, ``max_tokens`` on the output. With ``local_only`` the endpoint's host must resolve
to loopback or private addresses, checked when built and again before each call. The API key
goes only into the ``Authorization`` header the library sends; it is never logged nor put in
an error message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import openai

from connector.thinking.locality import require_local, require_local_async
from connector.thinking.source import ModelAnswer, ModelError

log = logging.getLogger("connector.thinking")

# Servers without keys (Ollama, llama.cpp) ignore the header; the library insists on some value.
NO_KEY = "not-needed"
SOURCE = "operator"


@dataclass(frozen=True)
class OperatorConfig:
    """Where the operator's model is and how long and how much it may answer."""

    url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    local_only: bool = False
    timeout_s: float = 60.0
    max_tokens: int = 4096


class OperatorModel:
    """A `ModelSource` over one OpenAI-compatible endpoint."""

    def __init__(self, config: OperatorConfig) -> None:
        if config.local_only:
            require_local(config.url)  # refuse at start-up, with the reason
        self.config = config
        self._client = openai.AsyncOpenAI(
            base_url=config.url,
            api_key=config.api_key or NO_KEY,
            timeout=config.timeout_s,
            max_retries=0,
        )

    async def complete(self, system: str, user: str, *, max_tokens: int) -> ModelAnswer:
        """One chat completion (temperature 0), its output within ``max_tokens`` and the configured bound."""
        if self.config.local_only:
            await require_local_async(self.config.url)
        bound = max(1, min(max_tokens, self.config.max_tokens))
        try:
            response = await self._client.chat.completions.create(
                model=self.config.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                max_tokens=bound,
                temperature=0,
            )
        except openai.APITimeoutError:
            raise ModelError(
                f"The operator's model did not answer within {self.config.timeout_s:g} seconds "
                "(CONNECTOR_MODEL_TIMEOUT_S)."
            ) from None
        except openai.APIConnectionError:
            raise ModelError("The operator's model could not be reached (connection failed).") from None
        except openai.APIStatusError as exc:
            raise ModelError(f"The operator's model answered HTTP {exc.status_code}.") from None
        except openai.OpenAIError as exc:
            # Bodies that are not chat completions, and the like: the type only (a message could echo a header).
            raise ModelError(f"The operator's model gave an unusable answer ({type(exc).__name__}).") from None
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        text = getattr(message, "content", None)
        if not isinstance(text, str) or not text.strip():
            raise ModelError("The operator's model answered with no text.")
        finish = getattr(choices[0], "finish_reason", None)
        return ModelAnswer(
            text=text, source=SOURCE, model=self.config.model, truncated=finish == "length"
        )
