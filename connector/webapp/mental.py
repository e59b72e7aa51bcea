"""The Mental models page's facts and actions: the brain's standing answers, read, refreshed, deleted.

Everything goes through the MCP tool's own class (`connector.mcp.mental.MentalModels`): the same
staleness, the same refresh (the web app has no host model to ask, so it uses the operator's model
when one is set, and otherwise says to refresh from an assistant) and the same writes.
"""

from __future__ import annotations

from dataclasses import dataclass
import mcp_types as types

from connector.engine.tending.mental import DeleteModel
from connector.engine.writes.errors import BrainError
from connector.i18n import N_, Text
from connector.mcp.arguments import ArgumentError, Args
from connector.mcp.definitions import READ_SCOPE, WRITE_SCOPE
from connector.mcp.mental import MentalModels, ModelState
from connector.mcp.tools import Caller, ToolFailure, snapshot_entries
from connector.webapp.actions import ActionRefused
from connector.webapp.markdown import render_markdown
from connector.webapp.thinking import VIEWER_REFUSAL, is_viewer
from connector.webapp.views import MemoryLine, line_of
from connector.workcopy.core import BrainUnavailable
from connector.workcopy.model import Account

NO_MODEL = N_("No model is set on this server, so it cannot rewrite this model itself. Ask your assistant to "
            "refresh it: brain_mental_model with action 'refresh' (it writes the text with its own model).")


@dataclass(frozen=True)
class ModelPage:
    """One model as the page shows it: its text as safe HTML, cited and newer memories as lines."""

    state: ModelState
    text_html: str
    cited: list[MemoryLine]
    gone: list[str]  # cited ids no longer in the brain (forgotten since)
    newer: list[MemoryLine]


@dataclass(frozen=True)
class ModelList:
    """The brain's models, and whether the person only views this brain."""

    states: list[ModelState]
    viewer: bool
    total: int = 0  # models the brain's file holds: more than `states` when over what is read per call


class MentalViews:
    """Reads and writes of the Mental models page for the signed-in person's active brain."""

    def __init__(self, models: MentalModels) -> None:
        self.models = models

    async def listing(self, account: Account) -> ModelList:
        """The models with their state (the first the tool reads, docs/thinking.md) and how many the file holds."""
        snapshot, states, total = await self.models.read(account)
        return ModelList(states, is_viewer(snapshot), total)

    async def create(self, account: Account, name: str, question: str) -> tuple[str, bool]:
        """A new model (no text until refreshed): its id, and True when stored at the store (else held).
        Raises `ActionRefused` with the reason when nothing was written."""
        if is_viewer(await self.models.tools.manager.snapshot(account)):
            raise ActionRefused(VIEWER_REFUSAL)
        caller = Caller(account, frozenset({READ_SCOPE, WRITE_SCOPE}))
        try:
            result = await self.models.handle(caller, Args({"action": "create", "name": name.strip(),
                                                            "question": question.strip()}))
        except (ArgumentError, ToolFailure, BrainError, BrainUnavailable) as exc:
            raise ActionRefused(str(exc)) from None
        structured = result.structured_content if isinstance(result, types.CallToolResult) else None
        if not structured:
            raise ActionRefused(Text("The mental model could not be created; nothing was written."))
        return str(structured["model"]["id"]), bool(structured.get("synced", True))

    async def page(self, account: Account, model_id: str) -> ModelPage | None:
        """One model, or None when the brain has no such model."""
        try:
            snapshot, state, cited = await self.models.one(account, model_id)
        except ToolFailure:
            return None
        entries = snapshot_entries(snapshot)
        lines = [line_of(item["id"], entries[item["id"]]) for item in cited if isinstance(entries.get(item["id"]), dict)]
        gone = [item["id"] for item in cited if not isinstance(entries.get(item["id"]), dict)]
        newer = [line_of(memory_id, entries[memory_id]) for memory_id in state.newer
                 if isinstance(entries.get(memory_id), dict)]
        return ModelPage(state, render_markdown(state.model.text), lines, gone, newer)

    async def refresh(self, account: Account, model_id: str) -> bool:
        """Rewrite the model with the operator's model; True when stored at the store (else held).
        Raises `ActionRefused` with the reason when nothing was written (no model, a failing one)."""
        caller = Caller(account, frozenset({READ_SCOPE, WRITE_SCOPE}))
        try:
            result = await self.models.refresh(caller, model_id)
        except (ToolFailure, BrainError, BrainUnavailable) as exc:
            raise ActionRefused(str(exc)) from None
        if not isinstance(result, types.CallToolResult) or result.structured_content is None:
            raise ActionRefused(NO_MODEL)
        structured = result.structured_content
        if structured.get("mode") == "evidence":
            note = structured.get("note")
            raise ActionRefused(NO_MODEL if not note else f"{note.split(' Nothing was written')[0]} Nothing was written.")
        if structured.get("mode") == "unchanged":
            raise ActionRefused(str(structured.get("note", "Nothing was written.")))
        return bool(structured.get("synced", True))

    async def delete(self, account: Account, model_id: str) -> bool:
        """Delete the model; True when stored at the store (else held)."""
        found = await self.page(account, model_id)
        if found is None:
            raise ActionRefused(Text("This brain has no such mental model (it may have been deleted already)."))
        caller = Caller(account, frozenset({READ_SCOPE, WRITE_SCOPE}))
        try:
            outcome = await self.models.tools.write_op(caller, DeleteModel(found.state.model.id), "mental-delete")
        except (ToolFailure, BrainError, BrainUnavailable) as exc:
            raise ActionRefused(str(exc)) from None
        return outcome.synced
