"""The refusal every reader raises: the file is not imported, for the reasons listed."""

from __future__ import annotations

from connector.engine.writes.errors import BrainError

# Reasons listed at most (a vault with thousands of bad notes says so in the first ones).
MAX_REASONS = 20


class ImportRefused(BrainError):
    """A file that cannot be imported; ``reasons`` name the line or entry and what is wrong."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons[:MAX_REASONS]
        more = len(reasons) - len(self.reasons)
        if more > 0:
            self.reasons.append(f"... and {more} more")
        super().__init__("; ".join(self.reasons))
