"""Build small gzip-compressed tar archives in memory (pure, deterministic)."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Mapping


def make_archive(files: Mapping[str, bytes], *, dirs: tuple[str, ...] = ()) -> bytes:
    """A .tar.gz holding ``files`` (path -> content) and empty ``dirs``; same input, same bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            info.mtime = 1_700_000_000
            tar.addfile(info)
        for name, content in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o644
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue(), mtime=0)


def brain_archive(tag: str, n_files: int = 3) -> bytes:
    """A plausible brain with ``n_files`` memory files whose content depends on ``tag``."""
    files = {
        f"memory/note-{i:03d}.md": f"---\ntitle: note {i}\n---\n{tag} body {i}\n".encode() for i in range(n_files)
    }
    return make_archive(files, dirs=("memory",))


def empty_archive() -> bytes:
    """A valid tar.gz with a directory entry but no regular files."""
    return make_archive({}, dirs=("memory",))


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256, the contract's checksum."""
    return hashlib.sha256(data).hexdigest()
