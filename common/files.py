"""Durable small-file writes shared by both servers: temporary file, fsync, rename, directory fsync."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


TEMP_SUFFIX = ".tmp"


def is_temporary(name: str) -> bool:
    """Whether a file name is one of ``write_atomic``'s temporary files (a crash may leave one)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def write_atomic(path: Path, data: bytes, *, fsync: bool = True, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename (then fsync the dir)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if fsync:
        fsync_dir(path.parent)
