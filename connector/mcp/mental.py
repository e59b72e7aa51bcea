"""brain_mental_model: standing questions whose answer is kept in the brain (docs/thinking.md).

The models live in the brain's ``mental-models.json`` (connector/engine/tending/mental.py), so every
device, replica and backup sees them. A refresh asks the same sources, in the same order, as
brain_reflect (the host's model through sampling, the operator's model, no model: then the host
gets the current text and the evidence and saves its rewrite with ``update``). Staleness is
derived from the brain's content each time it is asked: a model is stale when hybrid recall of
its question (with its relevance floor) finds memories created after its last refresh, whoever
wrote them, through whichever connector process.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import mcp_types as types

from connector.engine.recall.index import RecallError
from connector.engine.recall.indexcache import index_for
from connector.engine.tending.mental import (
    MAX_MODELS,
    CreateModel,
    DeleteModel,
    MentalModel,
    SaveModel,
    check_name,
    check_question,
    find_model,
    mental_models,
    new_model_id,
    newer_matches,
)
from connector.engine.writes.errors import BrainError
from connector.mcp import render
from connector.mcp.arguments import ArgumentError, Args
from connector.mcp.definitions import DEFAULT_REFLECT_TOKENS, MENTAL_ACTIONS
from connector.mcp.thinking import ThinkingTools, checked_answer, written_by
from connector.mcp.toolgroups import register_tool_group
from connector.mcp.tools import ToolFailure, ok_result, snapshot_entries
from connector.thinking import prompts
from connector.thinking.source import ModelError
from connector.workcopy.model import Account, Snapshot

if TYPE_CHECKING:
    from connector.mcp.tools import BrainTools, Caller

log = logging.getLogger("connector.mental")

REFRESH_ANSWER_TOKENS = 1024
# How many of the best matches of a model's question are looked at for staleness.
STALE_RECALL_TOP = 10
MAX_ARGUMENT_TEXT = 200_000  # read at most this much of 'text' before refusing it as too long
NOTHING_REFRESHED = ("nothing was refreshed or written. Call brain_mental_model again to refresh a model of the "
                     "brain in use now.")


@dataclass(frozen=True)
class ModelState:
    """A model and what the brain says of it now: empty (never written), fresh or stale."""

    model: MentalModel
    state: str
    newer: tuple[str, ...]  # memories written since its last refresh that match its question

    def as_dict(self) -> dict[str, Any]:
        """The model with its state, for a structured result."""
        return {**self.model.as_dict(), "state": self.state, "new_since_refresh": list(self.newer)}


class MentalModels:
    """The mental models of the signed-in person's active brain: reads, staleness, writes, refresh.

    Used by the brain_mental_model tool and by the web app's Mental models page.
    """

    def __init__(self, tools: BrainTools, thinking: ThinkingTools) -> None:
        self.tools = tools
        self.thinking = thinking

    def handlers(self) -> dict[str, Any]:
        """Tool name -> handler, for BrainTools' dispatch."""
        return {"brain_mental_model": self.handle}

    # ----- reads ----------------------------------------------------------------

    async def states(self, account: Account) -> tuple[Snapshot, list[ModelState]]:
        """The models of the active brain with their state (hybrid recall per model, off the event loop): the
        first `MAX_MODELS` of its file, however many an uploaded file holds."""
        snapshot, states, _ = await self.read(account)
        return snapshot, states

    async def read(self, account: Account) -> tuple[Snapshot, list[ModelState], int]:
        """`states`, and how many models the brain's file holds (more than are read when over the bound)."""
        snapshot = await self.tools.manager.snapshot(account)
        if snapshot.brain is None:
            return snapshot, [], 0
        models = mental_models(snapshot.brain)
        if not models:
            return snapshot, [], 0
        # Create refuses a 51st model, but an uploaded brain may hold any number: each costs a recall,
        # so every call reads the first MAX_MODELS only (the others stay in the file untouched).
        read = models[:MAX_MODELS]
        return snapshot, await asyncio.to_thread(self._states, snapshot, read), len(models)

    def _states(self, snapshot: Snapshot, models: list[MentalModel]) -> list[ModelState]:
        brain = snapshot.brain
        states = []
        created: dict[str, int | None] = {}
        if brain is not None and "index.json" in brain and any(model.refreshed_at for model in models):
            try:
                index = index_for(brain, snapshot.key, self.tools.index_cache)
                created = {record.id: record.created_ms for record in index.memories}
            except (RecallError, BrainError, ValueError, RecursionError):
                created = {}
        for model in models:
            if model.refreshed_at is None or not model.text:
                states.append(ModelState(model, "empty", ()))
                continue
            newer: list[str] = []
            if created:
                try:
                    hits = self.tools.run_recall(snapshot, model.question, STALE_RECALL_TOP, None, None, None, "hybrid")
                except Exception:  # a brain recall cannot read: brain_status and the list still answer
                    log.warning("mental model staleness skipped: the brain could not be recalled from")
                    hits = []
                newer = newer_matches(model, hits, created)
            states.append(ModelState(model, "stale" if newer else "fresh", tuple(newer)))
        return states

    async def summary(self, account: Account) -> dict[str, Any]:
        """For brain_status: how many models, and the names of the stale ones."""
        _, states, total = await self.read(account)
        summary: dict[str, Any] = {"count": total, "stale": [state.model.name for state in states
                                                             if state.state == "stale"]}
        if total > len(states):
            summary["read"] = len(states)
            summary["note"] = _over_bound(total, len(states))
        return summary

    async def one(self, account: Account, wanted: str) -> tuple[Snapshot, ModelState, list[dict[str, Any]]]:
        """One model (by id or name) with its state and its cited memories (id, title, whether still live)."""
        snapshot, states = await self.states(account)
        found = find_model([state.model for state in states], wanted)
        if found is None:
            raise ToolFailure(f"No mental model {render.one(wanted)} in this brain (action 'list' shows them).")
        state = next(item for item in states if item.model.id == found.id)
        entries = snapshot_entries(snapshot)
        cited = []
        for memory_id in found.cited:
            entry = entries.get(memory_id)
            title = entry.get("title") if isinstance(entry, dict) else None
            cited.append({"id": memory_id, "title": title if isinstance(title, str) else "", "live": entry is not None})
        return snapshot, state, cited

    # ----- the tool ----------------------------------------------------------------

    async def handle(self, caller: Caller, args: Args) -> types.CallToolResult | types.InputRequiredResult:
        """brain_mental_model: one action per call."""
        action = args.choice("action", MENTAL_ACTIONS, default="list")
        if action == "list":
            _, states, total = await self.read(caller.account)
            structured: dict[str, Any] = {"action": "list", "models": [_listed(state) for state in states]}
            text = _list_text(states)
            if total > len(states):
                structured.update(total=total, note=_over_bound(total, len(states)))
                text += f"\nNote: {structured['note']}"
            return ok_result(structured, text)
        if action == "create":
            return await self._create(caller, args)
        wanted = args.string("id", required=True, max_length=300)
        assert wanted is not None
        if action == "get":
            _, state, cited = await self.one(caller.account, wanted)
            structured = {"action": "get", "model": state.as_dict(), "state": state.state, "cited_memories": cited}
            return ok_result(structured, _model_text(state))
        if action == "delete":
            _, state, _ = await self.one(caller.account, wanted)
            outcome = await self.tools.write_op(caller, DeleteModel(state.model.id), "mental-delete")
            structured = {"action": "delete", "deleted": state.model.id, "synced": outcome.synced}
            return ok_result(structured, f"Deleted the mental model {render.one(state.model.name)}; the memories it "
                                         "cited stay.")
        if action == "update":
            return await self._update(caller, args, wanted)
        return await self.refresh(caller, wanted, args)

    async def _create(self, caller: Caller, args: Args) -> types.CallToolResult:
        name = args.string("name", required=True, max_length=1000)
        question = args.string("question", required=True, max_length=10_000)
        assert name is not None and question is not None
        try:
            op = CreateModel(new_model_id(), check_name(name), check_question(question), caller.account.client_name)
        except BrainError as exc:
            raise ArgumentError(f"{exc}; nothing was created.") from None
        outcome = await self.tools.write_op(caller, op, "mental-create")
        model = outcome.result["model"]
        structured = {"action": "create", "model": {**model, "state": "empty"}, "state": "empty",
                      "synced": outcome.synced}
        return ok_result(structured, f"Created the mental model {render.one(model['name'])} ({model['id']}). It has no "
                                     "text yet: call brain_mental_model with action 'refresh' and this id to write it.")

    async def _update(self, caller: Caller, args: Args, wanted: str) -> types.CallToolResult:
        text = args.string("text", required=True, max_length=MAX_ARGUMENT_TEXT)
        assert text is not None
        cited = args.string_list("cited", max_items=500)
        _, state, _ = await self.one(caller.account, wanted)
        try:
            op = SaveModel(state.model.id, text, cited, "host-update", caller.account.client_name,
                           caller.account.client_name)
        except BrainError as exc:
            raise ArgumentError(f"{exc}; nothing was saved.") from None
        structured = await self._save(caller, op, "update", "saved")
        model = structured["model"]
        return ok_result(structured, f"Saved the mental model {render.one(model['name'])}, citing "
                                     f"{render.plural(len(model['cited']), 'memory', 'memories')}.")

    async def _save(self, caller: Caller, op: SaveModel, action: str, mode: str) -> dict[str, Any]:
        """Write a model's new text; the structured result of ``action`` (the model is fresh now)."""
        outcome = await self.tools.write_op(caller, op, f"mental-{action}")
        saved = outcome.result["model"]
        return {"action": action, "mode": mode, "model": {**saved, "state": "fresh"}, "state": "fresh",
                "synced": outcome.synced}

    # ----- refresh ---------------------------------------------------------------------

    async def refresh(self, caller: Caller, wanted: str, args: Args | None = None
                      ) -> types.CallToolResult | types.InputRequiredResult:
        """Rewrite a model from its question's evidence with the first model available, and save it; with no
        model, the current text and the evidence for the host to rewrite and save with ``update``."""
        # One brain from the read to the write, across the host's retry and the operator's model's
        # wait: a brain_use meanwhile (or a share removed) must not send the new text elsewhere.
        caller = await self.thinking.pinned_once(caller, NOTHING_REFRESHED)
        snapshot, state, _ = await self.one(caller.account, wanted)
        model = state.model
        budget = (args or Args({})).integer("budget", default=DEFAULT_REFLECT_TOKENS, minimum=1, maximum=1_000_000)
        _, pack, notes = await self.thinking.evidence(caller, Args({"query": model.question, "budget": budget}))
        live = snapshot_entries(snapshot)
        allowed = [*pack.ids, *(memory_id for memory_id in model.cited if memory_id in live)]
        if not allowed:
            structured = {"action": "refresh", "mode": "unchanged", "model": state.as_dict(), "state": state.state,
                          "note": "No memory matches this model's question yet; nothing was written."}
            return ok_result(structured, f"No memory matches the question of {render.one(model.name)} yet; "
                                         "nothing was written.")
        answer = None
        try:
            answer = await self.thinking.think(caller, "mental-refresh", prompts.refresh_system(pack),
                                               prompts.refresh_user(model.name, model.question, model.text, pack),
                                               REFRESH_ANSWER_TOKENS, notes)
        except ModelError as exc:
            notes.insert(0, f"{exc} Nothing was written; the evidence follows for you to rewrite it instead.")
        if isinstance(answer, types.InputRequiredResult):
            return answer
        if answer is None:
            instruction = prompts.host_refresh_instruction(pack, model.id)
            structured: dict[str, Any] = {
                "action": "refresh", "mode": "evidence", "model": state.as_dict(), "state": state.state,
                "instruction": instruction, "new_since_refresh": list(state.newer), **pack.as_dict(),
            }
            if notes:
                structured["note"] = " ".join(notes)
            current = prompts.refresh_user(model.name, model.question, model.text, pack)
            return ok_result(structured, f"{instruction}\n\n{current}" + (f"\nNote: {structured['note']}" if notes else ""))
        checked = checked_answer(answer, allowed, notes, "new text")
        try:
            op = SaveModel(model.id, checked.text, checked.cited, answer.source, answer.model,
                           caller.account.client_name)
        except BrainError as exc:
            raise ToolFailure(f"The model's answer could not be kept ({exc}); nothing was written.") from None
        structured = await self._save(caller, op, "refresh", "synthesis")
        structured["written_by"] = {"source": answer.source, "model": answer.model}
        if notes:
            structured["note"] = " ".join(notes)
        text = (f"Refreshed {render.one(model.name)}, written by {written_by(answer)}:\n\n{checked.text}"
                + (f"\n\nNote: {structured['note']}" if notes else ""))
        return ok_result(structured, text)


def _over_bound(total: int, read: int) -> str:
    return (f"This brain's file holds {total:,} mental models; only the first {read} are read (a brain keeps at "
            f"most {MAX_MODELS}). Delete some to reach the others.")


def _listed(state: ModelState) -> dict[str, Any]:
    model = state.model
    return {"id": model.id, "name": model.name, "question": model.question, "state": state.state,
            "refreshed_at": model.refreshed_at, "cited_count": len(model.cited),
            "new_since_refresh": list(state.newer)}


def _list_text(states: list[ModelState]) -> str:
    if not states:
        return "This brain keeps no mental models yet (action 'create' adds one: a name and a question)."
    lines = [f"{render.plural(len(states), 'mental model')}:"]
    for state in states:
        extra = f", {render.plural(len(state.newer), 'newer memory', 'newer memories')} match" if state.newer else ""
        lines.append(f"- {render.one(state.model.name)} ({state.model.id}): {state.state}{extra}. "
                     f"Question: {render.one(state.model.question)}")
    return "\n".join(lines)


def _model_text(state: ModelState) -> str:
    """A model's name, state and question, then its text between fences no line of it can close: the
    text is kept in the brain, where another device or a member of a shared brain may have written it."""
    model = state.model
    head = f"Mental model {render.one(model.name)} ({model.id}), {state.state}. Question: {render.one(model.question)}"
    if state.newer:
        head += f"\nNewer memories match its question: {', '.join(map(render.one, state.newer))} (action 'refresh' " \
                "rewrites it)."
    if not model.text:
        return f"{head}\n\n(no text yet: action refresh writes it)"
    return "\n".join([head, "", *render.fenced(model.text, "mental-model")])


# Built after thinking.py's group (imported above, so registered first), on which it builds.
register_tool_group("mental", lambda tools, model, groups: MentalModels(tools, cast(ThinkingTools, groups["thinking"])))
