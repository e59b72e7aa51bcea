"""Small brain archives for the S3 tests."""

from __future__ import annotations

import io
import os
import tarfile


def archive(files: dict[str, bytes]) -> bytes:
    """A gzip-compressed tar of ``files``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def counter_archive(value: int) -> bytes:
    """An archive holding one counter file."""
    return archive({"counter.txt": str(value).encode(), "notes/a.md": b"a"})


def read_counter(data: bytes) -> int:
    """The counter value stored by ``counter_archive``."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        member = tar.extractfile("counter.txt")
        assert member is not None
        return int(member.read())


def big_archive(size: int, seed: int = 0) -> bytes:
    """An archive of about ``size`` bytes of incompressible content."""
    rnd = os.urandom(size)
    return archive({f"big-{seed}.bin": rnd})
