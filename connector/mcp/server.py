"""The MCP server: the official SDK's low-level server over stateless Streamable HTTP.

The SDK does the protocol (JSON-RPC, version negotiation for the handshake era
and 2026-07-28's ``server/discover``, the transport). This module only declares
the tools, resources and prompts, and hands each call to `BrainTools` (tools) or
`BrainContext` (resources, prompts) with the caller the HTTP layer authenticated
(put into the ASGI scope under ``CALLER_SCOPE_KEY``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.types import Message, Receive, Scope, Send

from connector.engine.writes.memorize import MAX_CONTENT_CHARS
from connector.mcp import mental, thinking  # noqa: F401  (each registers its tool group: toolgroups.py)
from connector.mcp.context import PROMPTS, RESOURCE_TEMPLATES, RESOURCES, BrainContext
from connector.mcp.definitions import INSTRUCTIONS
from connector.mcp.tools import BrainTools, Caller, error_result
from connector.thinking.host import CURRENT as HOST_SAMPLING
from connector.thinking.host import host_sampling

CALLER_SCOPE_KEY = "brain_connector.caller"
SERVER_NAME = "brain-connector"
SERVER_VERSION = "0.1.0"
MAX_REQUEST_BYTES = 1024 * 1024
BOUND_INSTRUCTIONS = (
    "\n- This connection serves one brain only (its URL names it): every tool acts on that brain, "
    "and there is no brain_use."
)


def _caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller | None:
    request = ctx.request
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        caller = scope.get(CALLER_SCOPE_KEY)
        if isinstance(caller, Caller):
            return caller
    return None


def build_server(tools: BrainTools, *, bound: bool = False) -> Server[Any]:
    """The low-level MCP server exposing ``tools`` (``bound``: for connections bound to one brain)."""

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools.list_tools(bound=bound))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        caller = _caller_of(ctx)
        if caller is None:
            # The HTTP layer authenticates every request; reaching here without a caller is a wiring bug.
            return error_result("Not signed in.")
        # Whether this call may ask the host's model (brain_reflect, brain_extract), for the call's duration.
        offered = host_sampling(ctx.protocol_version, ctx.session.client_capabilities, params)
        token = HOST_SAMPLING.set(offered)
        try:
            return await tools.call(params.name, params.arguments, caller)
        finally:
            HOST_SAMPLING.reset(token)

    context = BrainContext(tools)

    def signed_in(ctx: ServerRequestContext[Any, Any]) -> Caller:
        caller = _caller_of(ctx)
        if caller is None:
            raise MCPError(-32600, "Not signed in.")
        return caller

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=RESOURCES)

    async def list_resource_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=RESOURCE_TEMPLATES)

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await context.read_resource(params.uri, signed_in(ctx))

    async def list_prompts(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=PROMPTS)

    async def get_prompt(ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams) -> types.GetPromptResult:
        return await context.get_prompt(params.name, params.arguments, signed_in(ctx))

    return Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        title="Brain memory",
        description="The user's long-term memory (Brain Memory), shared across their devices.",
        instructions=INSTRUCTIONS + (BOUND_INSTRUCTIONS if bound else ""),
        get_tool_input_schema=tools.input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


class McpEndpoint:
    """The ASGI endpoint for ``POST /mcp``, or (``bound``) ``POST /mcp/brains/{brain}`` (stateless:
    nothing survives between requests)."""

    def __init__(self, tools: BrainTools, *, bound: bool = False) -> None:
        self.server = build_server(tools, bound=bound)
        self.sessions = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            stateless=True,
            security_settings=None,
            max_request_body_size=MAX_REQUEST_BYTES,
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the SDK's request manager for the app's lifetime."""
        async with self.sessions.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.sessions.handle_request(scope, receive, _too_large_explained(send))


# What a request over MAX_REQUEST_BYTES is answered: a JSON-RPC error, which MCP clients show (the
# SDK's plain-text 413 reached a model as "Server returned an error response", no reason given).
_TOO_LARGE_BODY = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": (
    f"The request is larger than {MAX_REQUEST_BYTES // (1024 * 1024)} MiB, the most this connector reads; "
    f"nothing was done. brain_memorize takes at most {MAX_CONTENT_CHARS:,} characters of content: "
    "save a long text as several memories.")}}).encode()


def _too_large_explained(send: Send) -> Send:
    """``send`` with the SDK's 413 for a body over MAX_REQUEST_BYTES answered as `_TOO_LARGE_BODY`."""
    replacing = False

    async def wrapped(message: Message) -> None:
        nonlocal replacing
        if message["type"] == "http.response.start" and message["status"] == 413:
            replacing = True
            await send({"type": "http.response.start", "status": 413, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(_TOO_LARGE_BODY)).encode())]})
        elif replacing and message["type"] == "http.response.body":
            if not message.get("more_body", False):  # the SDK's text is dropped, ours sent once
                await send({"type": "http.response.body", "body": _TOO_LARGE_BODY})
        else:
            await send(message)

    return wrapped
