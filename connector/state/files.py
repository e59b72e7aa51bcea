"""Private places for the connector's state on local disk: directories 0700 that others cannot write."""

from __future__ import annotations

from pathlib import Path

from common.files import open_mode


class StateError(RuntimeError):
    """The connector's state (its directory, bucket or key) is unusable: start-up refuses to continue."""


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) if missing; refuse a directory others can write."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if (mode := open_mode(path)) is not None:
        raise StateError(f"state directory {path} is writable by others (mode {mode:o})")
