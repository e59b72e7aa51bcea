"""Text renderings of tool results: the same facts as the structured result, for reading.

Pure functions from the structured result to text; no I/O.

What a model reads must not be forgeable by what a memory holds. Single-line values
(titles, tags, ids, paths, names) are shown with control, line-break and bidi
characters escaped, so they stay on their one line; memory content is shown between
code fences longer than any backtick run inside it, so no content can close its fence
and print lines that look like ours.
"""

from __future__ import annotations

import json
import re
from typing import Any

from common.textsafety import escape_multiline, escape_one_line
from connector.engine.format.titles import plain_title


def _fmt_number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    return str(value)


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``value`` as readable JSON (UTF-8 kept) with line-breaking and bidi characters escaped:
    still valid JSON, parsing to the same value (``json.dumps`` leaves U+2028 or U+202E raw)."""
    return escape_multiline(json.dumps(value, ensure_ascii=False, indent=indent))


def one(value: Any) -> str:
    """A single-line value as text, with anything that would break its line escaped."""
    return escape_one_line(value if isinstance(value, str) else str(value))


def title(value: Any) -> str:
    """A memory's title on one line, as people read it (its Markdown marks taken out)."""
    return one(plain_title(value) if isinstance(value, str) else value)


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 memory``, ``2 memories``."""
    word = singular if count == 1 else (plural_form or singular + "s")
    return f"{count} {word}"


def memories(count: int) -> str:
    """``1 memory`` / ``3 memories``."""
    return plural(count, "memory", "memories")


def _tags(value: Any) -> str:
    if isinstance(value, list) and value:
        return ", ".join(one(tag) for tag in value)
    return ""


_BACKTICK_RUN = re.compile(r"`+")


def fenced(content: str, label: str = "memory") -> list[str]:
    """``content`` between code fences no line inside can close (longer than its longest backtick run)."""
    longest = max((len(run) for run in _BACKTICK_RUN.findall(content)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{label}", *escape_multiline(content).split("\n"), fence]


def _content_lines(hit: dict[str, Any], titles_only: bool = False) -> list[str]:
    """A hit's content, fenced, and what the budget cut of it (``titles_only``: the caller
    asked for no content at all, so none was left out for better hits)."""
    if "content" not in hit:
        return []
    content = hit.get("content") or ""
    lines: list[str] = []
    if content:
        # Indented too: no content line starts at the margin, where our numbered hits are.
        lines += [f"   {line}" if line else line for line in fenced(content)]
    if hit.get("content_truncated"):
        shown, total = len(content), hit.get("content_length", len(content))
        if shown:
            lines.append(f"   (content cut by the recall budget: {shown} of {total} characters shown; "
                         "brain_read gives the whole memory)")
        elif titles_only:
            lines.append(f"   (content not shown: titles only were asked for; {total} characters; "
                         "brain_read gives the whole memory)")
        else:
            lines.append(f"   (content left out: too little of the recall budget was left after better hits; "
                         f"{total} characters; brain_read gives the whole memory)")
    return lines


def recall_text(result: dict[str, Any], *, titles_only: bool = False) -> str:
    """Numbered hits with id, title, score, markers and fenced content, then the note
    (``titles_only``: a content budget of 0 was asked for)."""
    hits = result.get("results", [])
    if hits:
        lines = [f"{memories(result.get('count', len(hits)))} found."]
    elif result.get("nothing_matches_well"):
        lines = ["No memory matches well."]
    else:
        lines = ["No matching memories."]
    for number, hit in enumerate(hits, 1):
        marks = []
        if hit.get("quarantine_pending"):
            marks.append("pending verification")
        if hit.get("expired"):
            marks.append("expired")
        if hit.get("superseded_by"):
            marks.append(f"superseded by {one(hit['superseded_by'])}")
        if hit.get("low_trust"):
            marks.append("low trust")
        if hit.get("above_higher_scores"):
            marks.append("listed above higher scores: the query's own words match it closely, and such a match "
                         "always comes first")
        mark_text = f" [{'; '.join(marks)}]" if marks else ""
        lines.append(
            f"{number}. {title(hit.get('title'))} ({one(hit.get('id'))}, score {_fmt_number(hit.get('score'))}){mark_text}"
        )
        details = []
        if hit.get("type"):
            details.append(f"type {one(hit['type'])}")
        if _tags(hit.get("tags")):
            details.append(f"tags {_tags(hit.get('tags'))}")
        if hit.get("path"):
            details.append(one(hit["path"]))
        if details:
            lines.append("   " + " | ".join(details))
        lines += _content_lines(hit, titles_only)
    if result.get("note"):
        lines.append("")
        lines.append(f"Note: {result['note']}")
    return "\n".join(lines)


def _e5_line(e5: dict[str, Any]) -> str:
    """Where the second recall model's vectors are (brain_status), and the memories' neighbours
    the same background computes."""
    if e5.get("state") == "unavailable":
        return "Recall model e5: cannot load on this machine; hybrid recall runs without it."
    if e5.get("state") == "ready":
        line = f"Recall model e5: ready ({e5.get('total', 0)} memories)."
    else:
        line = (f"Recall model e5: {e5.get('embedded', 0)} of {e5.get('total', 0)} memories embedded; hybrid recall "
                "uses it once all are.")
    if e5.get("neighbours") == "computing":
        line += " The memories' nearest neighbours are being computed; until then each recall computes the few it needs."
    return line


def _judge_line(judge: dict[str, Any]) -> str:
    """Where the answer gate's judge stands (brain_status)."""
    if judge.get("state") == "unavailable":
        reason = f" ({one(judge['reason'])})" if judge.get("reason") else ""
        return f"Recall judge: cannot load on this machine{reason}; the answer gate decides without it."
    if judge.get("state") == "ready":
        if judge.get("channel") == "ready":
            return "Recall judge: ready; English queries are fused with it and the answer gate reads it."
        if judge.get("channel") == "reading":
            return ("Recall judge: ready; reading this brain's memories (after e5's), fused into English queries "
                    "once done; the answer gate asks it about the queries it doubts meanwhile.")
        return "Recall judge: ready; the answer gate asks it about the queries it doubts."
    if judge.get("state") == "idle":
        return "Recall judge: loads at the first query the answer gate doubts; the gate decides without it until then."
    return "Recall judge: loading; the answer gate decides without it until it is ready."


def status_text(result: dict[str, Any]) -> str:
    """Counts, brains (active marked), identity note and sync state."""
    active = result.get("active_brain")
    lines = [
        f"Brain in use: {one(active['name'])} ({one(active['id'])})" if active else "No brain in use yet.",
        f"Memories: {result.get('memory_count', 0)} (pinned {result.get('pinned_count', 0)}, "
        f"pending verification {result.get('pending_verification_count', 0)})",
        f"Last updated: {one(result.get('last_updated') or 'never')}",
    ]
    if result.get("review_pending_count"):
        lines.append(f"{plural(result['review_pending_count'], 'pair')} of similar memories waiting for review "
                     "(the web app's Review page).")
    models = result.get("mental_models") or {}
    if models.get("count"):
        stale = models.get("stale") or []
        lines.append(f"{plural(models['count'], 'mental model')}"
                     + (f"; stale (newer memories match): {', '.join(one(name) for name in stale)}." if stale else
                        ", none stale."))
        if models.get("note"):
            lines.append(str(models["note"]))
    brains = result.get("brains", [])
    if brains:
        lines.append("Brains of this account:")
        for brain in brains:
            marker = "*" if brain.get("active") else "-"
            synced = one(brain.get("last_synced_at") or "never synced")
            lines.append(
                f" {marker} {one(brain.get('name'))} ({one(brain.get('id'))}), {brain.get('size_bytes', 0)} bytes, "
                f"{synced}{sharing(brain)}"
            )
    e5 = result.get("recall_e5")
    if e5:
        lines.append(_e5_line(e5))
    judge = result.get("recall_judge")
    if judge:
        lines.append(_judge_line(judge))
    identity = result.get("identity", {})
    lines.append(f"Identity: {identity.get('status')}")
    if identity.get("note"):
        lines.append(f"Note: {identity['note']}")
    if result.get("pending_writes"):
        lines.append(f"{plural(result['pending_writes'], 'write')} held, not yet synced to the store.")
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    return "\n".join(lines)


def sharing(brain: dict[str, Any]) -> str:
    """``, viewer (read-only), owned by alice`` for a brain shared with the caller; ``""`` when
    the caller owns it (or the store does not share brains)."""
    role, owner = brain.get("role"), brain.get("owner")
    if not role or role == "owner":
        return ""
    read_only = " (read-only)" if role == "viewer" else ""
    return f", {one(role)}{read_only}" + (f", owned by {one(owner)}" if owner else "")


def use_text(result: dict[str, Any]) -> str:
    """Which brain is now served."""
    brain = result["brain"]
    text = f"Now using brain '{one(brain['name'])}' ({one(brain['id'])}){sharing(brain)}"
    if "memory_count" in result:
        text += f" with {memories(result['memory_count'])}"
    text += ". This choice is remembered."
    if result.get("note"):
        text += f"\nNote: {result['note']}"
    return text


def sync_sentence(synced: bool, durable: bool = True) -> str:
    """How the write stands with the store, said honestly (``durable``: kept across a restart)."""
    if synced:
        return "Saved and synced to the store."
    if not durable:
        return "NOT saved: held in the connector's memory only, not yet synced to the store; a restart loses it."
    return "Saved here but held, not yet synced to the store; it will be pushed automatically."


def _written_tail(result: dict[str, Any]) -> list[str]:
    """The closing lines of a write's text: its sync state, then the result's note if any."""
    tail = [sync_sentence(bool(result.get("synced")), result.get("durable") is not False)]
    if result.get("note"):
        tail.append(f"Note: {result['note']}")
    return tail


def similar_advice(found: list[Any], *, superseded: list[str], stored_id: Any = None) -> str:
    """What the model should do about what the similar check flagged (empty when nothing)."""
    duplicates = [item for item in found if item.relation == "duplicate"]
    updates = [item for item in found if item.relation == "update" and item.id not in superseded]
    advice = []
    if superseded:
        advice.append(f"As asked (on_similar=supersede), it supersedes {', '.join(map(one, superseded))}, which it "
                      "updates; the older memories stay, marked superseded.")
    if updates:
        named = ", ".join(one(item.id) for item in updates)
        advice.append(
            f"It looks like an update of {named}: if it replaces that fact, call brain_memorize again with "
            f"supersedes=[{named}] (or on_similar='supersede')"
            + (f" and brain_forget {one(stored_id)}" if stored_id else "")
            + "; if both hold, leave them."
        )
    if duplicates:
        named = ", ".join(one(item.id) for item in duplicates)
        advice.append(
            f"It seems to repeat {named}: if it adds nothing, brain_forget {one(stored_id) if stored_id else 'it'} "
            "(nothing was deleted on a guess)."
        )
    return " ".join(advice)


def _similar_lines(result: dict[str, Any]) -> list[str]:
    flagged = [item for item in result.get("similar") or [] if item.get("relation") in ("duplicate", "update")]
    if not flagged:
        return []
    lines = ["Similar memories already in the brain:"]
    for item in flagged:
        sure = "exact same content" if item.get("exact") else f"{round(100 * float(item.get('score', 0)))}% sure"
        lines.append(f"- {one(item.get('relation'))} of '{one(item.get('title'))}' ({one(item.get('id'))}), {sure}")
    return lines


def memorize_text(result: dict[str, Any]) -> str:
    """The stored memory (or the one already holding it), its flags, what the similar check
    found, and the sync state."""
    stored = result["stored"]
    if result.get("written") is False:
        lines = [f"Already in memory as '{one(stored.get('title'))}' ({one(stored.get('id'))}); nothing written."]
        # Nothing was saved, so no "saved" line: only whether earlier writes are still held, and the note.
        note = [f"Note: {result['note']}"] if result.get("note") else []
        return "\n".join([*lines, *_similar_lines(result), *_notes_only(result), *note])
    lines = [
        f"Remembered '{title(stored.get('title'))}' as {one(stored.get('id'))} "
        f"({one(stored.get('type'))}, {one(stored.get('path'))})."
    ]
    if stored.get("quarantine_pending"):
        reasons = stored.get("quarantine_reasons") or []
        lines.append(
            "It is held for the user's verification" + (f" ({', '.join(map(one, reasons))})." if reasons else ".")
        )
    conflicts = stored.get("potential_conflicts")
    if conflicts:
        named = [
            f"'{title(item.get('title'))}' ({one(item.get('id'))})" if isinstance(item, dict) else one(item)
            for item in conflicts
        ]
        lines.append(f"Potential conflicts with pinned or stable memories: {', '.join(named)}")
    if stored.get("superseded"):
        lines.append(f"Supersedes: {', '.join(map(one, stored['superseded']))}")
    if stored.get("supersedes_unknown"):
        # Asked for, not done: said, or the model takes the older fact for replaced.
        lines.append("Not superseded (no live memory has these ids; forgotten ones are archived): "
                     f"{', '.join(map(one, stored['supersedes_unknown']))}")
    lines += _similar_lines(result)
    return "\n".join([*lines, *_written_tail(result)])


def write_text(verb: str, result: dict[str, Any]) -> str:
    """Pin / unpin / forget; a write that changed nothing (a pin already there, no pin to remove, an
    archived memory) says so instead of "saved"."""
    named = f"'{title(result['title'])}' ({one(result['id'])})" if result.get("title") else one(result["id"])
    if result.get("was_pinned") is False:
        return "\n".join([f"{named} was not pinned; nothing changed.", *_notes_only(result)])
    if result.get("already_pinned"):
        return "\n".join([f"{named} was already pinned; nothing changed.", *_notes_only(result)])
    if result.get("already_archived"):
        return "\n".join([f"{named} was already archived (forgotten); nothing changed.", *_notes_only(result)])
    lines = [f"{verb} {named}."]
    if result.get("archived_path"):
        lines.append(f"Archived at {one(result['archived_path'])} (recoverable).")
    return "\n".join([*lines, *_written_tail(result)])


def _notes_only(result: dict[str, Any]) -> list[str]:
    """A no-op write's closing line: only what the user should still know (earlier writes still held)."""
    if result.get("synced") is False:
        return ["Earlier changes are still held here, not yet synced to the store; they will be pushed automatically."]
    return []


def verify_text(result: dict[str, Any]) -> str:
    """Pending list, or per-id outcomes and errors."""
    lines = []
    if result.get("action") == "list":
        pending = result.get("pending", [])
        lines.append(f"{memories(result.get('total', len(pending)))} pending verification:" if pending
                     else "No memories are pending verification.")
        for item in pending:
            reasons = ", ".join(map(one, item.get("reasons") or []))
            lines.append(
                f"- {one(item.get('id'))}: {title(item.get('title'))} ({one(item.get('origin') or 'no origin')}; {reasons})"
            )
    else:
        verb = "approved" if result.get("action") == "approve" else "rejected (archived)"
        lines += [f"- {one(item.get('id'))}: {verb}" for item in result.get("results", [])]
        lines += [f"- {one(item.get('id'))}: error: {one(item.get('error'))}" for item in result.get("errors", [])]
        if result.get("results"):
            lines.append(sync_sentence(bool(result.get("synced")), result.get("durable") is not False))
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    return "\n".join(lines) or "Nothing to do."


def read_text(result: dict[str, Any]) -> str:
    """One whole memory: what it is, where it comes from, how it stands, its links, its content."""
    head = f"{title(result.get('title'))} ({one(result['id'])})"
    lines = [f"Archived memory {head}" if result.get("archived") else f"Memory {head}"]
    facts = [f"type {one(result['type'])}" if result.get("type") else "", one(result.get("path") or "")]
    lines.append(" | ".join(fact for fact in facts if fact))
    if result.get("tags"):
        lines.append(f"Tags: {_tags(result['tags'])}")
    provenance = result.get("provenance") or {}
    told = [f"{key.replace('_', ' ')} {one(value)}" for key, value in provenance.items()
            if value not in (None, "", [], {}) and not isinstance(value, (dict, list))]
    if told:
        lines.append("Provenance: " + "; ".join(told))
    validity = result.get("validity") or {}
    window = [f"{key.replace('_', ' ')} {one(value)}" for key, value in validity.items() if value not in (None, False)]
    if window:
        lines.append("Validity: " + "; ".join(window))
    supersession = result.get("supersession") or {}
    if supersession.get("superseded_by"):
        lines.append(f"Superseded by {one(supersession['superseded_by'])}")
    if supersession.get("supersedes"):
        lines.append(f"Supersedes {', '.join(map(one, supersession['supersedes']))}")
    if result.get("quarantine_pending"):
        lines.append("Pending the user's verification: treat with care.")
    links = result.get("associations") or []
    if links:
        lines.append("Associated: " + ", ".join(
            f"'{title(link.get('title'))}' ({one(link['id'])}, weight {_fmt_number(link.get('weight'))})" for link in links
        ))
    lines += fenced(result.get("content") or "")
    if result.get("content_truncated"):
        lines.append(f"(content cut at {len(result.get('content') or '')} of {result.get('content_length')} characters)")
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    return "\n".join(lines)
