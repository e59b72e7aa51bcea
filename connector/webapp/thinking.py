"""The Think page's facts and actions: reflect on a question, extract memories from pasted text.

Both go through the MCP tools' own class (`connector.mcp.thinking.ThinkingTools`): the same
evidence pack, the same model call, the same citation check and the same all-or-nothing save
(external origin, held for review). A browser offers no host sampling, so the only model here is
the operator's (``CONNECTOR_MODEL_URL``); without one, reflect shows the evidence pack and extract
is refused before anything is asked or written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as types

from connector.engine.writes.errors import BrainError
from connector.i18n import N_
from connector.mcp.arguments import ArgumentError, Args
from connector.mcp.definitions import READ_SCOPE, WRITE_SCOPE
from connector.mcp.thinking import ThinkingTools
from connector.mcp.tools import Caller, ToolFailure, snapshot_entries
from connector.webapp.actions import ActionRefused
from connector.webapp.markdown import render_markdown
from connector.webapp.views import MemoryLine, line_of
from connector.workcopy.accounts import UnknownBrain
from connector.workcopy.core import BrainUnavailable
from connector.workcopy.model import Account, Snapshot

NEEDS_MODEL = N_("This server has no model to think with, so it cannot reflect, extract or refresh mental models "
                 "itself. Its operator can set one (CONNECTOR_MODEL_URL and CONNECTOR_MODEL, see docs/thinking.md); "
                 "until then your assistant does this thinking with its own model through the brain_reflect, "
                 "brain_extract and brain_mental_model tools.")
VIEWER_REFUSAL = N_("You are a viewer of this brain: you can read it, but only its owners and editors save "
                    "memories or mental models to it. Nothing was written.")
MAX_QUESTION_CHARS = 2000


@dataclass(frozen=True)
class EvidenceGroup:
    """One theme of the evidence pack: the memories quoted under it, as list lines."""

    theme: str
    lines: list[MemoryLine]


@dataclass(frozen=True)
class Reflection:
    """brain_reflect's answer for the page: a synthesis with its citations, or (no model) the evidence."""

    question: str
    synthesis_html: str | None  # None: no model answered, the evidence is the answer
    written_by: str | None
    cited: list[MemoryLine]
    evidence: list[EvidenceGroup]
    note: str | None


@dataclass(frozen=True)
class Extraction:
    """brain_extract's save for the page: what was written (held ones marked pending) and what was not."""

    saved: list[MemoryLine]
    held: list[MemoryLine]  # of ``saved``: waiting for the person's approval (origin external)
    written_by: str
    note: str | None  # the tool's notes: already present word for word, review pairs, ...
    synced: bool


def is_viewer(snapshot: Snapshot) -> bool:
    """Whether the person only views the snapshot's brain (reads, never writes)."""
    return any(record.id == snapshot.brain_id and record.read_only for record in snapshot.identity.brains)


def _structured(result: Any) -> dict[str, Any]:
    """A tool's structured answer, or its refusal raised as `ActionRefused`."""
    if isinstance(result, types.CallToolResult) and result.structured_content is not None and not result.is_error:
        return result.structured_content
    if isinstance(result, types.CallToolResult) and result.content:
        raise ActionRefused(str(getattr(result.content[0], "text", "")) or NEEDS_MODEL)
    raise ActionRefused(NEEDS_MODEL)


class ThinkingViews:
    """Reflect and extract for the signed-in person's active brain, through the MCP tools' class."""

    def __init__(self, thinking: ThinkingTools) -> None:
        self.thinking = thinking

    @property
    def has_model(self) -> bool:
        """Whether the operator's model is set (the web app's only model: a browser offers no sampling)."""
        return self.thinking.model is not None

    async def viewer(self, account: Account) -> bool:
        """Whether the person only views their active brain."""
        return is_viewer(await self.thinking.tools.manager.snapshot(account))

    async def reflect(self, account: Account, question: str) -> Reflection:
        """brain_reflect on ``question``: the model's synthesis citing memories, or the evidence pack alone."""
        question = question.strip()
        if not question:
            raise ActionRefused(N_("Type a question to reflect on."))
        caller = Caller(account, frozenset({READ_SCOPE}))
        try:
            result = await self.thinking.reflect(caller, Args({"query": question[:MAX_QUESTION_CHARS]}))
        except (ArgumentError, ToolFailure, BrainError, BrainUnavailable, UnknownBrain) as exc:
            raise ActionRefused(str(exc)) from None
        structured = _structured(result)
        entries = snapshot_entries(await self.thinking.tools.manager.snapshot(account))

        def lines(ids: list[str]) -> list[MemoryLine]:
            return [line_of(memory_id, entries[memory_id]) for memory_id in ids
                    if isinstance(entries.get(memory_id), dict)]

        note = structured.get("note") if isinstance(structured.get("note"), str) else None
        if structured.get("mode") == "synthesis":
            by = structured.get("written_by") or {}
            return Reflection(question, render_markdown(str(structured.get("synthesis", ""))),
                              str(by.get("model") or ""), lines(list(structured.get("cited") or [])), [], note)
        groups = [EvidenceGroup(str(group.get("theme", "")), lines([item["id"] for item in group.get("memories", [])]))
                  for group in structured.get("groups", [])]
        return Reflection(question, None, None, [], [group for group in groups if group.lines], note)

    async def extract(self, account: Account, text: str, title: str) -> Extraction:
        """brain_extract with save: every candidate written in one write (external origin, held for review),
        or none with the reason (`ActionRefused`)."""
        if not self.has_model:
            raise ActionRefused(NEEDS_MODEL)
        if not text.strip():
            raise ActionRefused(N_("Paste the text to extract memories from."))
        # One brain for the check, the write and the saved lines, whatever is switched while the model works.
        account = await self.thinking.tools.manager.pinned(account)
        if await self.viewer(account):
            raise ActionRefused(VIEWER_REFUSAL)
        caller = Caller(account, frozenset({READ_SCOPE, WRITE_SCOPE}))
        arguments: dict[str, Any] = {"text": text, "save": True}
        if title.strip():
            arguments["document_title"] = title.strip()
        try:
            result = await self.thinking.extract(caller, Args(arguments))
        except (ArgumentError, ToolFailure, BrainError, BrainUnavailable, UnknownBrain) as exc:
            raise ActionRefused(str(exc)) from None
        structured = _structured(result)
        entries = snapshot_entries(await self.thinking.tools.manager.snapshot(account))
        ids = [item["stored"]["id"] for item in structured.get("saved", [])]
        saved = [line_of(memory_id, entries[memory_id]) for memory_id in ids if isinstance(entries.get(memory_id), dict)]
        note = structured.get("note") if isinstance(structured.get("note"), str) else None
        by = structured.get("written_by") or {}
        return Extraction(saved=saved, held=[line for line in saved if line.pending], written_by=str(by.get("model") or ""),
                          note=note, synced=bool(structured.get("synced", True)))
