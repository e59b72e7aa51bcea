"""Small helpers for worker processes that share files (`serve --workers N`, store and connector)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from collections.abc import Callable


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a pid reused by another user's process counts as gone).

    A zombie counts as gone too: a worker of `serve --workers N` that was killed stays one
    until the leader reaps it at shutdown, and must not be counted as serving meanwhile.
    """
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        # the state follows the command name, which may itself hold ")" or spaces
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal test is all there is


class FlushSoon:
    """Runs ``flush`` once, ``delay`` seconds after the first `request` since it last ran.

    For totals a worker leaves for the others: written within ``delay`` of a change, at
    most once per ``delay`` however many changes come. Outside an event loop it runs at once.
    """

    def __init__(self, flush: Callable[[], None], delay: float = 1.0) -> None:
        self._flush = flush
        self.delay = delay
        self._pending = False

    def request(self) -> None:
        """Ask for a run (one is already due: nothing to do)."""
        if self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._flush()
            return
        self._pending = True
        loop.call_later(self.delay, self._run)

    def _run(self) -> None:
        self._pending = False
        self._flush()
