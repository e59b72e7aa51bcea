"""What a reader found in a file: the memories to write, before any check against the brain."""

from __future__ import annotations

from dataclasses import dataclass, field

from connector.engine.writes.memorize import MemoryInput


@dataclass
class Imported:
    """The memories of one file, in the file's order.

    ``ids``: the id each memory had where it came from (None when it had none), so links
    among the file's memories (``related``, ``supersedes``) can be rewritten to the new
    ids. ``passed_over``: entries left out on purpose (an empty note, an attachment), each
    with its reason, for the summary.
    """

    format: str
    memories: list[MemoryInput] = field(default_factory=list)
    ids: list[str | None] = field(default_factory=list)
    passed_over: list[str] = field(default_factory=list)

    def add(self, memory: MemoryInput, original_id: str | None = None) -> None:
        """One more memory, with the id it had at its source."""
        self.memories.append(memory)
        self.ids.append(original_id)
