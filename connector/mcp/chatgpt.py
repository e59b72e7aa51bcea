"""ChatGPT's two tools, ``search`` and ``fetch``, in the shape OpenAI's connectors require.

ChatGPT's deep research and company-knowledge connectors use a server only through a
tool ``search`` (one string ``query``) answering one text item holding
``{"results": [{"id", "title", "url"}]}`` and a tool ``fetch`` (one string ``id``)
answering one text item holding ``{"id", "title", "text", "url", "metadata"}``; the
same object goes in ``structuredContent``. ChatGPT cites a result only when its ``url``
is a non-empty string, so every url is absolute: the memory's page in the web app.

Pure functions from brain_recall's and brain_read's results (same recall, same reads,
same permissions: `BrainTools` calls those handlers) to these shapes; no I/O.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import mcp_types as types

from common.textsafety import escape_one_line
from connector.engine.format.graphemes import shortened
from connector.engine.format.titles import plain_title
from connector.mcp.http import path_segment
from connector.mcp.render import json_text

# How many memories one search returns (ChatGPT fetches the ones it wants to read).
SEARCH_LIMIT = 10
# A title for a memory that has none: its first words.
_TITLE_CHARS = 80


def memory_url(base_url: str, memory_id: str, brain_id: str) -> str:
    """The memory's page in the web app, absolute, in the brain it was found in
    (``<base>/app/memory/<id>?brain=<brain id>``): the web app otherwise opens the account's
    brain in use, which need not be a bound connection's brain, nor the one searched."""
    query = f"?{urlencode({'brain': brain_id})}" if brain_id else ""
    return f"{base_url.rstrip('/')}/app/memory/{path_segment(memory_id)}{query}"


def _title(value: Any, memory_id: str, content: Any = None) -> str:
    """A one-line title as people read it (Markdown marks out): the memory's own, else the
    start of its text, else its id."""
    if isinstance(value, str) and value.strip():
        return escape_one_line(plain_title(value.strip()))
    if isinstance(content, str) and content.strip():
        first = " ".join(content.split())
        return escape_one_line(shortened(first, _TITLE_CHARS))
    return memory_id


def _json_result(document: dict[str, Any]) -> types.CallToolResult:
    """One text item holding ``document`` as JSON (a memory's line-breaking and bidi characters
    escaped: they stay inside their string when read), and the same object as structured content."""
    text = json_text(document)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=document, is_error=False
    )


def _failed(result: types.CallToolResult) -> types.CallToolResult | None:
    """``result`` itself when it is a refusal (its message is what ChatGPT should see), else None."""
    return result if result.is_error or result.structured_content is None else None


def search_result(recall: types.CallToolResult, base_url: str, brain_id: str) -> types.CallToolResult:
    """brain_recall's answer (from the brain ``brain_id``) as ChatGPT's ``search`` answer."""
    failed = _failed(recall)
    if failed is not None:
        return failed
    assert recall.structured_content is not None
    results = [
        {
            "id": str(hit["id"]),
            "title": _title(hit.get("title"), str(hit["id"]), hit.get("content")),
            "url": memory_url(base_url, str(hit["id"]), brain_id),
        }
        for hit in recall.structured_content.get("results", [])
        if isinstance(hit, dict) and isinstance(hit.get("id"), str)
    ]
    return _json_result({"results": results})


def _metadata(found: dict[str, Any]) -> dict[str, str]:
    """What ChatGPT may show beside a fetched memory: flat string values only."""
    provenance = found.get("provenance") if isinstance(found.get("provenance"), dict) else {}
    validity = found.get("validity") if isinstance(found.get("validity"), dict) else {}
    tags = [tag for tag in found.get("tags") or [] if isinstance(tag, str)]
    values: dict[str, Any] = {
        "type": found.get("type"),
        "tags": ", ".join(tags) if tags else None,
        "origin": provenance.get("origin"),
        "project": provenance.get("project"),
        "created": provenance.get("created"),
        "valid_from": validity.get("valid_from"),
        "valid_until": validity.get("valid_until"),
        "archived": "true" if found.get("archived") else None,
        "expired": "true" if validity.get("expired") else None,
        "pending_verification": "true" if found.get("quarantine_pending") else None,
        "truncated": "true" if found.get("content_truncated") else None,
    }
    return {key: escape_one_line(str(value)) for key, value in values.items() if value not in (None, "")}


def fetch_result(read: types.CallToolResult, base_url: str, brain_id: str) -> types.CallToolResult:
    """brain_read's answer (from the brain ``brain_id``) as ChatGPT's ``fetch`` answer."""
    failed = _failed(read)
    if failed is not None:
        return failed
    found = read.structured_content
    assert found is not None
    memory_id = str(found["id"])
    return _json_result(
        {
            "id": memory_id,
            "title": _title(found.get("title"), memory_id, found.get("content")),
            "text": found.get("content") or "",
            "url": memory_url(base_url, memory_id, brain_id),
            "metadata": _metadata(found),
        }
    )
