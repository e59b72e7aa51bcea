"""From the memories a reader found to the one write: checked against the brain, fresh ids.

Every memory runs the similar check brain_memorize runs (connector/engine/similar.py, given
here as a function so the web app and the command line pass their own way of running it):
one the brain already holds word for word (the check's ``exact`` duplicate, or the same
normalised content as a live memory or an earlier memory of the same file) is not written
again and is reported; one the check flags as a duplicate in other words or an update is
written and reported (the web app's import write queues such pairs for review, as
brain_memorize does). A memory that looks like it holds a credential is refused and listed (the dry run
shows it before anything is written); the others are imported.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from connector.engine.format.brain import ARCHIVE_INDEX, Brain
from connector.engine.writes.credentials import credentials_in_memories
from connector.engine.writes.errors import BrainError
# MAX_CONTENT_CHARS: checked before anything reads a note whole. Without it a zip of 600 KB brought one
# note of 200 MB: 45 s of the credential check and 3.7 GB of memory.
from connector.engine.writes.memorize import MAX_CONTENT_CHARS, MemoryInput, OverLimit, over_limit
from connector.engine.writes.ops import Memorize
from connector.engine.tending.similar import Incoming, Similar
from connector.engine.format.text import memory_body, normalised_content
from connector.i18n import Text
from connector.imports.errors import ImportRefused
from connector.imports.imported import Imported

MAX_IMPORT_MEMORIES = 5000
SimilarCheck = Callable[[Incoming], list[Similar]]


@dataclass(frozen=True)
class Duplicate:
    """A memory of the file the brain already holds: not written."""

    title: str
    existing_id: str
    existing_title: str


@dataclass
class ImportPlan:
    """A checked import: what would be written, what was refused or left out, and why."""

    inputs: list[MemoryInput] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    # What the similar check flagged, reported: {"id", "relation", "score", "of"} per pair ("of": the new memory).
    flagged: list[dict[str, Any]] = field(default_factory=list)
    passed_over: list[str] = field(default_factory=list)
    format: str = ""

    @property
    def skipped(self) -> int:
        """Memories not written because the brain holds them already."""
        return len(self.duplicates)

    def operation(self) -> Memorize:
        """The one write (a fresh copy each time: apply fills in ids and time). It skips what the
        brain holds word for word when it is applied (``skip_held``): the same file imported from
        two tabs or devices at once was checked by each before the other's write."""
        return Memorize(list(self.inputs), ids=list(self.ids), skip_held=True)

    @classmethod
    def refused(cls, reasons: list[str], format: str = "") -> ImportPlan:  # noqa: A002 - the field's name
        """A file refused as a whole: nothing to write."""
        return cls(errors=list(reasons), format=format)


@dataclass(frozen=True)
class ImportSummary:
    """The dry run's result: counts the person confirms before anything is written."""

    new: int
    pending_verification: int
    skipped: int
    errors: list[str]
    duplicates: list[Duplicate] = field(default_factory=list)
    passed_over: list[str] = field(default_factory=list)
    format: str = ""


def _entries(brain: Brain | None) -> dict[str, Any]:
    if brain is None:
        return {}
    index = brain.read_json("index.json")
    memories = index.get("memories") if isinstance(index, dict) else None
    return {key: value for key, value in memories.items() if isinstance(value, dict)} if isinstance(memories, dict) else {}


def _fresh_id(now: datetime, taken: set[str]) -> str:
    while True:
        candidate = f"mem_{now.astimezone(UTC).strftime('%Y%m%d')}_{secrets.token_hex(3)}"
        if candidate not in taken:
            taken.add(candidate)
            return candidate


def plan_import(imported: Imported, brain: Brain | None, now: datetime, *,
                similar: SimilarCheck | None = None, similar_limit: int | None = None) -> ImportPlan:
    """Check ``imported`` against ``brain``: duplicates left out and reported, flags reported, fresh ids.

    ``similar`` is the similar check of one incoming memory against the brain as it is
    (run on the first ``similar_limit`` memories, all when None); the exact-duplicate
    check without vectors runs on every memory whatever the limit. ``related`` and
    ``supersedes`` naming other memories of the same file are rewritten to their new ids,
    so links survive the move; a ``supersedes`` naming a memory of the brain the file does not
    hold is dropped and listed in ``passed_over`` (an import replaces nothing it did not bring). Refuses (`ImportRefused`) a file with too many memories.
    """
    plan = ImportPlan(format=imported.format, passed_over=list(imported.passed_over))
    if len(imported.memories) > MAX_IMPORT_MEMORIES:
        raise ImportRefused([Text("The file has more than %(count)s memories; split it.", count=MAX_IMPORT_MEMORIES)])
    entries = _entries(brain)
    held: dict[str, tuple[str, str]] = {}  # normalised content -> (id, title) of a live memory
    for memory_id, entry in entries.items():
        path = entry.get("path")
        text = brain.read_text(path) if brain is not None and isinstance(path, str) else None
        held.setdefault(normalised_content(memory_body(text or "")), (memory_id, str(entry.get("title") or "")))
    taken = set(entries)
    renamed: dict[str, str] = {}
    for number, (memory, original) in enumerate(zip(imported.memories, imported.ids, strict=True)):
        if len(memory.content) > MAX_CONTENT_CHARS:  # before any check that reads it all
            plan.errors.append(Text("%(title)s: longer than %(count)s characters; not imported",
                                    title=memory.title, count=MAX_CONTENT_CHARS))
            continue
        over = over_limit(memory)  # what brain_memorize would not take either: refused, listed
        if over is not None:
            plan.errors.append(_over_limit(memory.title, over))
            continue
        kinds = credentials_in_memories([memory])  # the same check as every other write: refused, listed
        if kinds:
            plan.errors.append(Text("%(title)s: looks like it contains a credential (%(kinds)s); not imported",
                                    title=memory.title, kinds=", ".join(kinds)))
            continue
        known = held.get(normalised_content(memory.content))  # no embedding needed for these
        found = similar(Incoming(memory.content, memory.title, memory.tags, memory.type)) \
            if known is None and similar is not None and (similar_limit is None or number < similar_limit) else []
        exact = next((item for item in found if item.exact), None)
        known = (exact.id, exact.title) if exact is not None else known
        if known is not None:
            existing_id, existing_title = known
            plan.duplicates.append(Duplicate(memory.title, existing_id, existing_title))
            if original is not None:
                renamed[original] = existing_id  # links to it point at the copy already here
            continue
        new_id = _fresh_id(now, taken)
        if original is not None:
            renamed[original] = new_id
        plan.flagged += [{**item.to_json(), "of": len(plan.inputs)} for item in found if item.flagged]
        held[normalised_content(memory.content)] = (new_id, memory.title)  # a second copy in the file is a duplicate
        plan.inputs.append(memory)
        plan.ids.append(new_id)
    # The brain's own memories, live or archived: a file's `supersedes` must not replace one.
    ours = (set(entries) | _archived_ids(brain)) - set(renamed)
    relinked = []
    for memory in plan.inputs:
        memory, dropped = _relinked(memory, renamed, ours)
        plan.passed_over += [Text("%(title)s: 'supersedes' names %(id)s, a memory of this brain the file does not "
                                  "hold; that link was dropped", title=memory.title, id=other) for other in dropped]
        relinked.append(memory)
    plan.inputs = relinked
    return plan


def _over_limit(title: str, over: OverLimit) -> Text:
    """Why a memory of a file is not imported: which of its fields holds too much."""
    if over.kind == "items":
        return Text("%(title)s: '%(field)s' has more than %(count)s items; not imported",
                    title=title, field=over.field, count=over.count)
    if over.kind == "item_chars":
        return Text("%(title)s: '%(field)s' holds an item longer than %(count)s characters; not imported",
                    title=title, field=over.field, count=over.count)
    return Text("%(title)s: '%(field)s' is longer than %(count)s characters; not imported",
                title=title, field=over.field, count=over.count)


def _archived_ids(brain: Brain | None) -> set[str]:
    """The ids of the brain's archive (forgotten or rejected memories a restore brings back)."""
    index = brain.read_json(ARCHIVE_INDEX) if brain is not None else None
    memories = index.get("memories") if isinstance(index, dict) else None
    return set(memories) if isinstance(memories, dict) else set()


def _relinked(memory: MemoryInput, renamed: dict[str, str], ours: set[str]) -> tuple[MemoryInput, list[str]]:
    """``memory`` with its links to memories of the file rewritten to their ids in the brain, and
    the ``supersedes`` links naming ``ours`` (memories of the brain the file does not hold) dropped,
    returned: superseding one would hide it from recall (and move its pin) on the file's word."""
    if not (memory.related or memory.supersedes):
        return memory, []
    mapping = memory.to_mapping()
    dropped = [other for other in mapping["supersedes"] if other in ours]
    mapping["related"] = [renamed.get(other, other) for other in mapping["related"]]
    mapping["supersedes"] = [renamed.get(other, other) for other in mapping["supersedes"] if other not in ours]
    return MemoryInput.from_mapping(mapping), dropped


def dry_run(plan: ImportPlan, brain: Brain | None, now: datetime) -> ImportSummary:
    """Apply the import to a copy of the brain: exactly what the real write would do, nothing kept."""
    extra = {"duplicates": list(plan.duplicates), "passed_over": list(plan.passed_over), "format": plan.format}
    if not plan.inputs:
        return ImportSummary(0, 0, plan.skipped, list(plan.errors), **extra)
    scratch = brain.copy() if brain is not None else Brain()
    try:
        result = plan.operation().apply(scratch, now)
    except BrainError as exc:
        return ImportSummary(0, 0, plan.skipped, [*plan.errors, str(exc)], **extra)
    stored = [item for item in result["stored"] if not item.get("already_present")]
    pending = sum(1 for item in stored if item.get("quarantine_pending"))
    return ImportSummary(len(stored), pending, plan.skipped, list(plan.errors), **extra)
