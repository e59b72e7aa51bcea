"""brain_reflect and brain_extract: the tools that think with a model (docs/thinking.md).

Where the thinking happens, in the issue's order: the host's model through MCP sampling, when the
client declared it on protocol 2026-07-28 (the multi-round trip: connector/thinking/host.py; older
versions cannot carry it over our stateless transport, docs/thinking.md says why); then the
operator's model (``CONNECTOR_MODEL_URL``); then no model, where brain_reflect returns the
evidence for the host's model and brain_extract writes nothing. Recall and writes go through BrainTools' own paths (brain_recall's recall,
brain_memorize's write with its checks).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import mcp_types as types

from common.textsafety import has_unsafe_chars
from connector.engine.writes.credentials import find_credentials
from connector.engine.writes.errors import BrainError
from connector.mcp import render
from connector.mcp.arguments import ArgumentError, Args
from connector.engine.format.tokens import CHARS_PER_TOKEN
from connector.mcp.definitions import (
    DEFAULT_REFLECT_TOKENS,
    MAX_EXTRACT_CHARS,
    MAX_EXTRACT_ITEMS,
    MAX_RECALL_CHARS,
    MAX_RECALL_LIMIT,
    MAX_REFLECT_TOKENS,
    MEMORY_TYPES,
    MIN_REFLECT_TOKENS,
)
from connector.thinking import prompts
from connector.thinking.answers import CheckedSynthesis, ExtractionRefused, check_citations, parse_candidates
from connector.thinking.evidence import EvidencePack, build_pack
from connector.thinking.host import CURRENT as HOST
from connector.thinking.source import ModelAnswer, ModelError, ModelSource

from connector.mcp.toolgroups import register_tool_group
from connector.mcp.tools import ToolFailure
from connector.workcopy.accounts import UnknownBrain
from connector.workcopy.core import BrainUnavailable

if TYPE_CHECKING:
    from connector.mcp.tools import BrainTools, Caller

Handler = Callable[["Caller", Args], Awaitable[types.CallToolResult | types.InputRequiredResult]]
# Output bounds of one answer (the operator's CONNECTOR_MODEL_MAX_TOKENS may bound it lower).
REFLECT_ANSWER_TOKENS = 1024
EXTRACT_ANSWER_TOKENS = 4096

NO_MODEL_FOR_EXTRACT = (
    "brain_extract needs a model, and none is available: this host did not offer sampling (MCP protocol "
    "2026-07-28) and no operator model is set (CONNECTOR_MODEL_URL). Nothing was extracted or written. "
    "Pick out the facts worth keeping yourself and save each with brain_memorize."
)
Thought = ModelAnswer | types.InputRequiredResult | None
# How `pinned_once` ends its refusal, per tool: what was not done, and how to do it in the brain in use now.
NOTHING_SAVED = "nothing was extracted or written. Call brain_extract again to save into the brain in use now."
NOTHING_REFLECTED = "nothing was answered. Call brain_reflect again to reflect on the brain in use now."


def written_by(answer: ModelAnswer) -> str:
    """Who wrote an answer, for the result's text."""
    return f"the host's model {answer.model}" if answer.source == "host" else f"the operator's model {answer.model}"


def _ok(structured: dict[str, Any], text: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured, is_error=False
    )


class ThinkingTools:
    """The two tools' handlers, over one BrainTools (its recall, snapshot and memorize) and a model or none."""

    def __init__(self, tools: BrainTools, model: ModelSource | None) -> None:
        self.tools = tools
        self.model = model

    def handlers(self) -> dict[str, Handler]:
        """Tool name -> handler, for BrainTools' dispatch."""
        return {"brain_reflect": self.reflect, "brain_extract": self.extract}

    async def think(self, caller: Caller, key: str, system: str, user: str, max_tokens: int,
                    notes: list[str]) -> Thought:
        """An answer from the first source that has one: the host's model (asked through an interim
        result, answered on the retry), the operator's model (its calls bounded per account), or None
        (no model). A model failure raises ModelError; a host that did not answer falls through, noted."""
        host = HOST.get()
        if host.can_sample:
            answer = host.answer(key)
            if answer is not None:
                return answer
            if key not in host.responses:
                return host.ask(key, system, user, max_tokens=max_tokens, brain=caller.account.brain)
            notes.append("The host's model gave no usable answer.")
        if self.model is not None:
            return await self.model.complete(system, user, max_tokens=max_tokens, caller=caller.account.subject)
        return None

    async def pinned_once(self, caller: Caller, nothing_done: str) -> Caller:
        """``caller`` addressing one brain by id for the whole call, across the host's round trips
        and the wait on the operator's model; every thinking call that writes after a model's
        answer (brain_extract with save, a mental model's refresh), and brain_reflect, whose retry
        recalls the evidence again and checks the answer's citations against it, resolves its
        brain with this.

        The first round pins the brain in use now (`BrainTools.pinned`); `think` carries it to the
        retry in the request state. The retry works in that brain, checked again as a brain a
        call names is: a brain_use meanwhile does not move the write, and a brain no longer
        reachable (a share removed) refuses it rather than falling back to another brain.
        ``nothing_done`` ends that refusal (what was not done; e.g. `NOTHING_SAVED`)."""
        named = HOST.get().brain()
        if named is None:
            return await self.tools.pinned(caller)
        account = caller.account
        if account.brain:  # a connection bound to one brain (/mcp/brains/{id}) writes there only
            pinned = await self.tools.pinned(caller)
            if pinned.account.brain != named:
                raise ToolFailure(f"This call began in another brain than the one this connection is bound to; "
                                  f"{nothing_done}")
            return pinned
        found = await self.tools.manager.bound_brain(replace(account, brain=named))
        if found is None:
            raise ToolFailure(f"The brain this call began in ({named}) is gone, or no longer shared with you; "
                              f"{nothing_done}")
        return replace(caller, account=replace(account, brain=found.id))

    # ----- brain_reflect ------------------------------------------------------

    async def evidence(self, caller: Caller, args: Args) -> tuple[str, EvidencePack, list[str]]:
        """The question, its evidence pack within the budget, and notes (clamped values, recall notes)."""
        query = args.string("query", required=True, max_length=2000)
        assert query is not None
        tokens, clamped = args.clamped_integer(
            "budget", default=DEFAULT_REFLECT_TOKENS, minimum=MIN_REFLECT_TOKENS, maximum=MAX_REFLECT_TOKENS
        )
        tags = {tag.lower() for tag in args.string_list("tags", max_items=20)}
        project = args.string("project", max_length=300)
        found = await self.tools.recall_structured(
            caller,
            {"query": query, "limit": MAX_RECALL_LIMIT, "project": project,
             # With a tag filter some hits are dropped: fetch text for more so the budget still fills.
             "max_tokens": min(MAX_RECALL_CHARS // CHARS_PER_TOKEN, tokens * (3 if tags else 1))},
        )
        hits = [hit for hit in found.get("results", []) if not tags or tags & {str(t).lower() for t in hit.get("tags") or []}]
        snapshot = await self.tools.manager.snapshot(caller.account)
        entries: dict[str, Any] = {}
        if snapshot.brain is not None and hits:
            index = await asyncio.to_thread(snapshot.brain.read_json, "index.json")
            memories = index.get("memories") if isinstance(index, dict) else None
            entries = memories if isinstance(memories, dict) else {}
        pack = build_pack(hits, entries, tokens * CHARS_PER_TOKEN, budget_tokens=tokens)
        notes = [note for note in (clamped, found.get("note")) if note]
        if pack.left_out:
            notes.append(f"{render.plural(pack.left_out, 'more memory', 'more memories')} matched but did not fit "
                         "the budget.")
        return query, pack, notes

    async def reflect(self, caller: Caller, args: Args) -> types.CallToolResult | types.InputRequiredResult:
        """A synthesis by the host's or the operator's model citing memory ids, or the evidence for the host."""
        # The host's answer is checked against the evidence recalled again on its retry: from the
        # brain the first round recalled from, not one switched to (or no longer shared) meanwhile.
        caller = await self.pinned_once(caller, NOTHING_REFLECTED)
        query, pack, notes = await self.evidence(caller, args)
        answer: Thought = None
        if pack.ids:
            try:
                answer = await self.think(caller, "reflect", prompts.reflect_system(pack),
                                          prompts.reflect_user(query, pack), REFLECT_ANSWER_TOKENS, notes)
            except ModelError as exc:
                # Read-only, so nothing is lost: the host's model gets the evidence instead.
                notes.insert(0, f"{exc} The evidence follows for you to answer from instead.")
        if isinstance(answer, types.InputRequiredResult):
            return answer
        if answer is not None:
            checked = checked_answer(answer, pack.ids, notes, "synthesis")
            structured: dict[str, Any] = {
                "mode": "synthesis",
                "query": query,
                "synthesis": checked.text,
                "written_by": {"source": answer.source, "model": answer.model},
                "cited": checked.cited,
                "memories": [{"id": item.id, "title": item.title} for _, items in pack.groups for item in items],
                "budget_chars": pack.budget_chars,
                "budget_tokens": pack.budget_tokens,
            }
            if notes:
                structured["note"] = " ".join(notes)
            header = f"Synthesis written by {written_by(answer)} from {render.plural(len(pack.ids), 'memory', 'memories')}"
            return _ok(structured, f"{header}:\n\n{checked.text}" + (f"\n\nNote: {structured['note']}" if notes else ""))
        instruction = prompts.host_instruction(pack)
        structured = {"mode": "evidence", "query": query, "instruction": instruction, **pack.as_dict()}
        if notes:
            structured["note"] = " ".join(notes)
        text = f"{instruction}\n\nQuestion: {query}\n{pack.render()}" + (f"\nNote: {structured['note']}" if notes else "")
        return _ok(structured, text)

    # ----- brain_extract ------------------------------------------------------

    async def extract(self, caller: Caller, args: Args) -> types.CallToolResult | types.InputRequiredResult:
        """Candidate memories from a text, by the host's or the operator's model; saved through brain_memorize
        with ``save``."""
        text = args.string("text", required=True, max_length=10 * MAX_EXTRACT_CHARS)
        assert text is not None
        if len(text) > MAX_EXTRACT_CHARS:
            raise ArgumentError(
                f"'text' has {len(text):,} characters; brain_extract takes at most {MAX_EXTRACT_CHARS:,} per call. "
                "Nothing was extracted or written: split the document and extract each part."
            )
        title = args.string("document_title", max_length=200)
        if title is not None and has_unsafe_chars(title):
            raise ArgumentError("'document_title' must be plain text on one line")
        save = args.boolean("save")
        if save:
            # The brain in use when the call began, also on the host's retry: the model may take a
            # while, and a brain_use from another client of the same account meanwhile (or a share
            # removed) must not send what this call saves into another brain.
            caller = await self.pinned_once(caller, NOTHING_SAVED)
        notes: list[str] = []
        try:
            answer = await self.think(caller, "extract", prompts.extract_system(MAX_EXTRACT_ITEMS),
                                      prompts.extract_user(text, title), EXTRACT_ANSWER_TOKENS, notes)
            if answer is None:
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=" ".join([*notes, NO_MODEL_FOR_EXTRACT]))],
                    is_error=True,
                )
            if isinstance(answer, types.InputRequiredResult):
                return answer
            candidates = parse_candidates(answer.text, MEMORY_TYPES, MAX_EXTRACT_ITEMS)
        except ModelError as exc:
            raise ArgumentError(f"{exc} Nothing was extracted or written; try again later.") from None
        except ExtractionRefused as exc:
            raise ArgumentError(f"The model's answer was refused ({exc}); nothing was written.") from None
        source = source_tag(title, self.tools.manager.now())
        structured: dict[str, Any] = {
            "candidates": [candidate.as_dict() for candidate in candidates],
            "written_by": {"source": answer.source, "model": answer.model},
            "source_tag": source,
            "saved": [],
        }
        if save and candidates:
            structured["saved"] = await self._save(caller, candidates, source, structured)
        lines = [f"{render.plural(len(candidates), 'candidate memory', 'candidate memories')} extracted by "
                 f"{written_by(answer)}" + (f", saved with the tag {source}" if structured["saved"] else "") + ":"]
        lines += candidate_lines(candidates)
        if structured.get("note"):
            lines.append(f"Note: {structured['note']}")
        return _ok(structured, "\n".join(lines))

    async def _save(self, caller: Caller, candidates: list[Any], source: str, structured: dict[str, Any]) -> list[dict[str, Any]]:
        """Every candidate, tagged with ``source``, in ONE write through brain_memorize's checks
        (`BrainTools.memorize_many`): all saved, or none with the reason (credentials refuse all first)."""
        flagged = [number for number, c in enumerate(candidates, 1) if find_credentials(c.title, c.content, *c.tags)]
        if flagged:
            raise ArgumentError(
                f"Nothing was written: candidate(s) {', '.join(map(str, flagged))} look like they hold a credential. "
                "Extract again from the text without the secret, or save the other facts with brain_memorize."
            )
        # Facts drawn from outside text are external, whoever picked them out: the same suspect-content
        # rules and the same hold for verification as brain_memorize with origin "external".
        items = [{"content": c.content, "title": c.title, "type": c.type, "tags": [*c.tags, source],
                  "origin": "external"} for c in candidates]
        try:
            result = await self.tools.memorize_many(caller, items, task="extracting")
        except (ToolFailure, BrainError, BrainUnavailable, UnknownBrain) as exc:
            # One write: a refusal (a viewer's brain, a bad candidate, the store refusing for good) saved none.
            # The candidates come back in the message: what the model extracted is not lost.
            listed = "\n".join(candidate_lines(candidates))
            raise ArgumentError(f"{exc} Nothing was written: none of the {len(candidates)} candidates was saved. "
                                f"They were:\n{listed}") from None
        notes = [structured["note"]] if structured.get("note") else []
        if result["already_present"]:
            notes.append(f"{render.plural(len(result['already_present']), 'candidate was', 'candidates were')} "
                         "already in the brain word for word and not written again: "
                         + ", ".join(render.one(item["id"]) for item in result["already_present"]) + ".")
        held = [stored["id"] for stored in result["stored"] if stored.get("quarantine_pending")]
        if held:
            notes.append(f"{render.plural(len(held), 'saved memory is', 'saved memories are')} held for verification, "
                         "as everything drawn from outside text is (origin external): the user approves or rejects "
                         "them with brain_verify.")
        if result.get("review_queued"):
            notes.append("Some saved memories may repeat or update older ones; the user sees the pairs in their "
                         "review queue.")
        if result.get("note"):
            notes.append(result["note"])
        if notes:
            structured["note"] = " ".join(notes)
        structured["synced"] = result["synced"]
        return [{"stored": stored} for stored in result["stored"]]


def candidate_lines(candidates: list[Any]) -> list[str]:
    """One line per candidate memory, as the result's text lists them: a line break in a content (a
    model's, drawn from a document anyone wrote) is shown escaped, or it printed lines of its own."""
    return [f"- [{c.type}] {render.one(c.title)}: {render.one(c.content)}" for c in candidates]


def checked_answer(answer: ModelAnswer, allowed: list[str], notes: list[str], what: str) -> CheckedSynthesis:
    """The model's text with citations outside ``allowed`` removed; notes say what was removed, that the
    ``what`` (synthesis, new text) cites nothing, or that the answer was cut."""
    checked = check_citations(answer.text, allowed)
    if checked.removed:
        notes.append("The model cited ids that are not among the evidence; they were removed: "
                     + ", ".join(render.one(memory_id) for memory_id in checked.removed[:10]) + ".")
    if not checked.cited:
        notes.append(f"The {what} cites no memory: treat it with care.")
    if answer.truncated:
        notes.append("The answer was cut at the output-token bound.")
    return checked


def source_tag(title: str | None, now: datetime) -> str:
    """The tag every memory from one document carries: ``source:<title as a slug>`` (else the time)."""
    slug = re.sub(r"[^\w]+", "-", (title or "").lower()).strip("-_")[:60].strip("-_")
    return f"source:{slug or 'pasted-' + now.strftime('%Y%m%d-%H%M%S')}"


register_tool_group("thinking", lambda tools, model, groups: ThinkingTools(tools, model))
