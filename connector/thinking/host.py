"""The host's own model through MCP sampling, where our stateless transport can carry it: protocol
2026-07-28's multi-round trip. A tool call returns `InputRequiredResult` holding a
``sampling/createMessage`` request; the client has its model answer and calls the tool again with
the answer in ``inputResponses``; the tool then finishes with it. Nothing waits in between, so any
worker or replica can take the retry.

Older protocol versions would need the request on the POST's response stream and the answer back
in the same process, which a stateless JSON-response server cannot do (docs/thinking.md).

What this tools/call offers is put in a context variable by the MCP layer (connector/mcp/server.py)
for the duration of one call, so the tool handlers keep their one signature.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from common.textsafety import has_lone_surrogate, one_line
from connector.thinking.source import ModelAnswer

SOURCE = "host"
# Echoed back by the client; never trusted (the evidence is recomputed on the retry). A call adds
# the brain it resolved on its first round (`BRAIN_STATE`): the retry reads and writes there, or
# nowhere, once that brain is checked again as any brain a call names is (ThinkingTools.pinned_once).
REQUEST_STATE = "brain-connector:sampling:v1"
BRAIN_STATE = ";brain="
MAX_BRAIN_STATE = 200  # a brain id or name, as a bound connection's URL carries it


@dataclass(frozen=True)
class HostSampling:
    """What one tools/call allows: whether the host's model can be asked, and answers it already gave."""

    can_sample: bool = False
    responses: dict[str, Any] = field(default_factory=dict)
    state: str | None = None  # the request state the client echoed on this retry, as sent

    def brain(self) -> str | None:
        """The brain our first round's request state named (`ask` with ``brain``), as echoed; None
        on a first round or when the state names none. Only an address: it is checked again."""
        if not self.state or not self.state.startswith(REQUEST_STATE + BRAIN_STATE):
            return None
        named = self.state[len(REQUEST_STATE + BRAIN_STATE):]
        return named if 0 < len(named) <= MAX_BRAIN_STATE and named.isprintable() else None

    def answer(self, key: str) -> ModelAnswer | None:
        """The host model's answer to our request ``key``, when the client sent a usable one."""
        response = self.responses.get(key)
        if isinstance(response, dict):
            try:
                response = types.CreateMessageResult.model_validate(response)
            except ValueError:
                return None
        content = getattr(response, "content", None)
        text = getattr(content, "text", None)
        if not isinstance(text, str) or not text.strip() or has_lone_surrogate(text):  # no text to send on
            return None
        model = getattr(response, "model", None)
        return ModelAnswer(
            text=text,
            source=SOURCE,
            model=one_line(str(model))[:200] or "unknown" if model else "unknown",  # client-chosen: one plain line
            truncated=getattr(response, "stop_reason", None) == "maxTokens",
        )

    def ask(self, key: str, system: str, user: str, *, max_tokens: int, brain: str = "") -> types.InputRequiredResult:
        """The interim result asking the host's model (bounded in tokens, no other context);
        ``brain``: the brain the call reads and writes, carried to the retry in the request state."""
        request = types.CreateMessageRequest(
            params=types.CreateMessageRequestParams(
                messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=user))],
                system_prompt=system,
                include_context="none",
                temperature=0,
                max_tokens=max_tokens,
            )
        )
        state = REQUEST_STATE + (BRAIN_STATE + brain if brain else "")
        return types.InputRequiredResult(input_requests={key: request}, request_state=state)


NO_SAMPLING = HostSampling()
CURRENT: ContextVar[HostSampling] = ContextVar("brain_connector_host_sampling", default=NO_SAMPLING)


def host_sampling(protocol_version: str | None, capabilities: Any, params: Any) -> HostSampling:
    """What a tools/call offers: sampling on protocol 2026-07-28 when the client declared it."""
    modern = protocol_version in MODERN_PROTOCOL_VERSIONS
    declared = getattr(capabilities, "sampling", None) is not None
    responses = getattr(params, "input_responses", None) or {}
    state = getattr(params, "request_state", None)
    return HostSampling(can_sample=modern and declared, responses=dict(responses) if modern else {},
                        state=state if modern and isinstance(state, str) else None)
