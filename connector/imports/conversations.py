"""ChatGPT and Claude data exports (``conversations.json``, alone or in the export's zip).

Conversations are not memories: each goes through extraction by the operator's model (the
prompts and the strict answer check of brain_extract, docs/thinking.md), and the candidates
become memories of origin ``external`` (held for the person's verification, like any
extraction), tagged with the conversation's ``source:`` tag. One model failure or refused
answer refuses the whole import: all conversations' memories are written in one write, or
none. Without a model nothing is read further: the import says what it needs.

ChatGPT's file is a list of conversations, each with ``title``, ``create_time`` (epoch
seconds) and ``mapping``: message nodes linked by ``parent``, the thread shown ending at
``current_node``; a message has ``author.role`` and ``content.parts``. Claude's file is a
list of conversations with ``uuid``, ``name``, ``created_at`` and ``chat_messages``: each
with ``sender`` (``human`` or ``assistant``) and ``text`` (or ``content`` blocks of type ``text``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from connector.engine.writes.memorize import connector_memory
from connector.i18n import N_, Text
from connector.imports.errors import ImportRefused
from connector.imports.imported import Imported
from connector.mcp.definitions import MAX_EXTRACT_CHARS, MAX_EXTRACT_ITEMS, MEMORY_TYPES
from connector.mcp.thinking import EXTRACT_ANSWER_TOKENS, source_tag
from connector.thinking import prompts
from connector.thinking.answers import ExtractionRefused, parse_candidates
from connector.thinking.source import ModelError, ModelSource

CHATGPT = "chatgpt"
CLAUDE = "claude"
FORMATS = (CHATGPT, CLAUDE)
FILE_NAME = "conversations.json"
MAX_CONVERSATIONS = 1000  # one model call each at least: more is a job to split
NEEDS_MODEL = N_("Importing conversations needs a model to pick out the facts worth keeping, and none is set: "
               "set CONNECTOR_MODEL_URL and CONNECTOR_MODEL (docs/thinking.md) and import again. Nothing was imported.")
_ROLES = {"user": "User", "human": "User", "assistant": "Assistant"}


@dataclass(frozen=True)
class Conversation:
    """One conversation as text to extract from."""

    id: str
    title: str
    created: str | None  # ISO 8601, when the export says
    text: str  # "User: ...\n\nAssistant: ..." in the thread's order


def kind_of(document: Any) -> str | None:
    """CHATGPT or CLAUDE when a parsed JSON document is such an export, else None."""
    if not isinstance(document, list) or not document:
        return None
    first = document[0]
    if isinstance(first, Mapping) and isinstance(first.get("mapping"), Mapping):
        return CHATGPT
    if isinstance(first, Mapping) and isinstance(first.get("chat_messages"), list):
        return CLAUDE
    return None


def read(document: Any, kind: str, name: str) -> list[Conversation]:
    """The conversations of an export with any text, in the file's order; bad entries refuse the file."""
    if kind_of(document) != kind:
        raise ImportRefused([Text("%(name)s is not a %(kind)s conversations export.", name=name,
                                  kind="ChatGPT" if kind == CHATGPT else "Claude")])
    if len(document) > MAX_CONVERSATIONS:
        raise ImportRefused([Text("The file has more than %(count)s conversations; split it.", count=MAX_CONVERSATIONS)])
    found: list[Conversation] = []
    problems: list[str] = []
    for position, item in enumerate(document, start=1):
        try:
            conversation = _chatgpt(item, position) if kind == CHATGPT else _claude(item, position)
        except ValueError as exc:
            problems.append(Text("conversation %(position)s: %(reason)s", position=position, reason=str(exc)))
            continue
        if conversation.text:
            found.append(conversation)
    if problems:
        raise ImportRefused(problems)
    return found


def _string(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _role(value: Any) -> str | None:
    """The speaker of a message; None for anything else (a list or object there is not hashable)."""
    return _ROLES.get(value) if isinstance(value, str) else None


def _epoch(value: Any) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e11:
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return None


def _chatgpt(item: Any, position: int) -> Conversation:
    if not isinstance(item, Mapping) or not isinstance(item.get("mapping"), Mapping):
        raise ValueError("no 'mapping' of messages")
    mapping = item["mapping"]
    # The thread shown: from current_node up through the parents (branches edited away are left out).
    node_id = item.get("current_node")
    if not isinstance(node_id, str) or node_id not in mapping:
        leaves = [key for key, node in mapping.items() if isinstance(node, Mapping) and not node.get("children")]
        node_id = leaves[-1] if leaves else None
    thread: list[str] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, Mapping):
            raise ValueError(f"message {node_id!r} is not an object")
        line = _chatgpt_line(node.get("message"))
        if line:
            thread.append(line)
        node_id = node.get("parent")
    title = _string(item.get("title")) or f"ChatGPT conversation {position}"
    conversation_id = _string(item.get("conversation_id")) or _string(item.get("id")) or str(position)
    return Conversation(conversation_id, title, _epoch(item.get("create_time")), "\n\n".join(reversed(thread)))


def _chatgpt_line(message: Any) -> str:
    if not isinstance(message, Mapping):
        return ""
    author = message.get("author")
    role = _role(author.get("role")) if isinstance(author, Mapping) else None
    content = message.get("content")
    metadata = message.get("metadata")
    if role is None or not isinstance(content, Mapping) or \
            isinstance(metadata, Mapping) and metadata.get("is_visually_hidden_from_conversation"):
        return ""
    parts = content.get("parts")
    text = "\n".join(part.strip() for part in parts if isinstance(part, str) and part.strip()) \
        if isinstance(parts, list) else _string(content.get("text"))
    return f"{role}: {text}" if text else ""


def _claude(item: Any, position: int) -> Conversation:
    if not isinstance(item, Mapping) or not isinstance(item.get("chat_messages"), list):
        raise ValueError("no 'chat_messages' list")
    lines = []
    for number, message in enumerate(item["chat_messages"], start=1):
        if not isinstance(message, Mapping):
            raise ValueError(f"message {number} is not an object")
        role = _role(message.get("sender"))
        text = _string(message.get("text"))
        if not text and isinstance(message.get("content"), list):
            text = "\n".join(_string(block.get("text")) for block in message["content"]
                             if isinstance(block, Mapping) and block.get("type") == "text" and _string(block.get("text")))
        if role and text:
            lines.append(f"{role}: {text}")
    title = _string(item.get("name")) or f"Claude conversation {position}"
    created = _string(item.get("created_at")) or None
    return Conversation(_string(item.get("uuid")) or str(position), title, created, "\n\n".join(lines))


def _pieces(text: str) -> list[str]:
    """The text in pieces extraction takes (at most MAX_EXTRACT_CHARS), cut between messages when it can."""
    pieces: list[str] = []
    while len(text) > MAX_EXTRACT_CHARS:
        cut = text.rfind("\n\n", 0, MAX_EXTRACT_CHARS)
        cut = cut if cut > MAX_EXTRACT_CHARS // 2 else MAX_EXTRACT_CHARS
        pieces.append(text[:cut])
        text = text[cut:].lstrip("\n")
    return [*pieces, text] if text else pieces


async def extract(conversations: list[Conversation], kind: str, name: str, model: ModelSource | None,
                  now: datetime) -> Imported:
    """Every conversation through the model's extraction; the candidates as memories of origin external.

    No model refuses with NEEDS_MODEL before any call; one failed call or refused answer
    refuses the whole import (nothing of it is written)."""
    if model is None:
        raise ImportRefused([Text(NEEDS_MODEL)])
    imported = Imported(kind)
    label = "ChatGPT" if kind == CHATGPT else "Claude"
    for position, conversation in enumerate(conversations, start=1):
        tag = source_tag(conversation.title, now)
        for piece in _pieces(conversation.text):
            try:
                answer = await model.complete(prompts.extract_system(MAX_EXTRACT_ITEMS),
                                              prompts.extract_user(piece, conversation.title),
                                              max_tokens=EXTRACT_ANSWER_TOKENS)
                candidates = parse_candidates(answer.text, list(MEMORY_TYPES), MAX_EXTRACT_ITEMS)
            except (ModelError, ExtractionRefused) as exc:
                raise ImportRefused([Text("conversation %(position)s (%(title)s): %(reason)s; nothing was imported",
                                          position=position, title=conversation.title, reason=str(exc))]) from None
            for candidate in candidates:
                memory = connector_memory(candidate.content, title=candidate.title, type=candidate.type,
                                          tags=[*candidate.tags, tag], origin="external", agent=answer.model,
                                          task="extracting")
                where = f"imported from {name} ({label} conversation {conversation.title!r}"
                where += f", {conversation.created})" if conversation.created else ")"
                imported.add(replace(memory, path=f"imported/{kind}/", source=where))
    return imported
