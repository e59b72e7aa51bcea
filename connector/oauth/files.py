"""Private files of the OAuth state, written so a crash leaves the old or the new one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_private(path: Path, payload: bytes, *, tmp_prefix: str, durable: bool = True) -> None:
    """Write ``payload`` to ``path`` (mode 0600) through a temporary file and a rename.

    With ``durable`` the file and then its directory are fsynced, so the write
    survives a power cut once this returns. A failure removes the temporary file.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=tmp_prefix, dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    if durable:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
