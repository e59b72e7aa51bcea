"""Text renderings of tool results: the same facts as the structured result, for reading.

Pure functions from the structured result to text; no I/O.
"""

from __future__ import annotations

from typing import Any


def _fmt_number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    return str(value)


def _tags(value: Any) -> str:
    if isinstance(value, list) and value:
        return ", ".join(str(tag) for tag in value)
    return ""


def recall_text(result: dict[str, Any]) -> str:
    """Numbered hits with id, title, score and markers, then the note."""
    hits = result.get("results", [])
    lines = [f"{result.get('count', len(hits))} memories found." if hits else "No matching memories."]
    for number, hit in enumerate(hits, 1):
        marks = []
        if hit.get("quarantine_pending"):
            marks.append("pending verification")
        if hit.get("expired"):
            marks.append("expired")
        if hit.get("superseded_by"):
            marks.append(f"superseded by {hit['superseded_by']}")
        if hit.get("low_trust"):
            marks.append("low trust")
        mark_text = f" [{'; '.join(marks)}]" if marks else ""
        lines.append(f"{number}. {hit.get('title')} ({hit.get('id')}, score {_fmt_number(hit.get('score'))}){mark_text}")
        details = []
        if hit.get("type"):
            details.append(f"type {hit['type']}")
        if _tags(hit.get("tags")):
            details.append(f"tags {_tags(hit.get('tags'))}")
        if hit.get("path"):
            details.append(str(hit["path"]))
        if details:
            lines.append("   " + " | ".join(details))
    if result.get("note"):
        lines.append("")
        lines.append(f"Note: {result['note']}")
    return "\n".join(lines)


def status_text(result: dict[str, Any]) -> str:
    """Counts, brains (active marked), identity note and sync state."""
    active = result.get("active_brain")
    lines = [
        f"Brain in use: {active['name']} ({active['id']})" if active else "No brain in use yet.",
        f"Memories: {result.get('memory_count', 0)} (pinned {result.get('pinned_count', 0)}, "
        f"pending verification {result.get('pending_verification_count', 0)})",
        f"Last updated: {result.get('last_updated') or 'never'}",
    ]
    brains = result.get("brains", [])
    if brains:
        lines.append("Brains of this account:")
        for brain in brains:
            marker = "*" if brain.get("active") else "-"
            synced = brain.get("last_synced_at") or "never synced"
            lines.append(
                f" {marker} {brain.get('name')} ({brain.get('id')}), {brain.get('size_bytes', 0)} bytes, {synced}"
            )
    identity = result.get("identity", {})
    lines.append(f"Identity: {identity.get('status')}")
    if identity.get("note"):
        lines.append(f"Note: {identity['note']}")
    if result.get("pending_writes"):
        lines.append(f"{result['pending_writes']} write(s) held, not yet synced to the store.")
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    return "\n".join(lines)


def use_text(result: dict[str, Any]) -> str:
    """Which brain is now served."""
    brain = result["brain"]
    text = f"Now using brain '{brain['name']}' ({brain['id']})"
    if "memory_count" in result:
        text += f" with {result['memory_count']} memories"
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


def memorize_text(result: dict[str, Any]) -> str:
    """The stored memory, its flags, and the sync state."""
    stored = result["stored"]
    lines = [f"Remembered '{stored.get('title')}' as {stored.get('id')} ({stored.get('type')}, {stored.get('path')})."]
    if stored.get("quarantine_pending"):
        reasons = stored.get("quarantine_reasons") or []
        lines.append("It is held for the user's verification" + (f" ({', '.join(map(str, reasons))})." if reasons else "."))
    conflicts = stored.get("potential_conflicts")
    if conflicts:
        lines.append(f"Potential conflicts with pinned or stable memories: {conflicts}")
    if stored.get("superseded"):
        lines.append(f"Supersedes: {stored['superseded']}")
    return "\n".join([*lines, *_written_tail(result)])


def write_text(verb: str, result: dict[str, Any]) -> str:
    """Pin / unpin / forget."""
    title = result.get("title")
    named = f"'{title}' ({result['id']})" if title else str(result["id"])
    lines = [f"{verb} {named}."]
    if result.get("archived_path"):
        lines.append(f"Archived at {result['archived_path']} (recoverable).")
    return "\n".join([*lines, *_written_tail(result)])


def verify_text(result: dict[str, Any]) -> str:
    """Pending list, or per-id outcomes and errors."""
    if result.get("action") == "list":
        pending = result.get("pending", [])
        if not pending:
            return "No memories are pending verification."
        lines = [f"{result.get('total', len(pending))} memories pending verification:"]
        for item in pending:
            reasons = ", ".join(map(str, item.get("reasons") or []))
            lines.append(f"- {item.get('id')}: {item.get('title')} ({item.get('origin') or 'no origin'}; {reasons})")
        return "\n".join(lines)
    lines = []
    for item in result.get("results", []):
        verb = "approved" if result.get("action") == "approve" else "rejected (archived)"
        lines.append(f"- {item.get('id')}: {verb}")
    for item in result.get("errors", []):
        lines.append(f"- {item.get('id')}: error: {item.get('error')}")
    if result.get("results"):
        lines.append(sync_sentence(bool(result.get("synced")), result.get("durable") is not False))
    if result.get("note"):
        lines.append(f"Note: {result['note']}")
    return "\n".join(lines) or "Nothing to do."
