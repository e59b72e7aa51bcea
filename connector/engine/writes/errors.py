"""Errors raised by brain writes."""

from __future__ import annotations


class BrainError(ValueError):
    """A write refused because of its input or the brain's state; nothing was changed.

    The message is safe to show to the user (it never contains memory content).
    """


class ArchivedMemory(BrainError):
    """The memory a change names is archived (forgotten), not live. The message says how to
    restore it where people usually do (the web app); a command line says its own way."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(f"{memory_id} is archived (forgotten), not a live memory; the user can restore it "
                         "from its page in the web app first")
        self.memory_id = memory_id
