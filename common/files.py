"""Durable small-file writes shared by both servers: temporary file, fsync, rename, directory fsync;
and opening a stored file for reading that refuses anything but a regular file."""

from __future__ import annotations

import errno
import os
import stat
import time
import uuid
from pathlib import Path
from typing import BinaryIO


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


def write_temporary(path: Path, data: bytes, *, fsync: bool = True, mode: int = 0o600) -> tuple[Path, os.stat_result]:
    """Write ``data`` to a new temporary file beside ``path`` (fsynced when ``fsync``); returns
    its path and status. The caller renames or links it into place, or removes it."""
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
            status = os.fstat(fd)
        finally:
            os.close(fd)
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp, status


def remove_quietly(path: Path) -> None:
    """Remove ``path`` if it is there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_atomic(path: Path, data: bytes, *, fsync: bool = True, mode: int = 0o600) -> os.stat_result:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename (then fsync the dir);
    returns the new file's status."""
    tmp, status = write_temporary(path, data, fsync=fsync, mode=mode)
    try:
        os.rename(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    if fsync:
        fsync_dir(path.parent)
    return status


# File timestamps are coarse (a kernel tick). A file read within this margin of its
# mtime could be replaced by another file with the same inode number, mtime and size,
# so such reads are not cached (the "racy timestamp" rule); older files are safe to cache.
RACY_MARGIN_NS = 50_000_000


def settled(st_mtime_ns: int) -> bool:
    """True when a file with this mtime can be cached by (inode, mtime, size)."""
    return time.time_ns() - st_mtime_ns > RACY_MARGIN_NS


def open_mode(path: Path) -> int | None:
    """The permission bits of directory ``path`` when its group or others may write it (another
    local user could plant files there: a users.json, a state record), else None."""
    mode = path.stat().st_mode & 0o777
    return mode if mode & 0o022 else None


class NotARegularFile(OSError):
    """A stored file to be read is something else (a named pipe, a device, a directory, a symbolic
    link): outside damage, or someone with write access to the data directory. Reading it could
    wait forever (a pipe without a writer) or never end (a device)."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"  # without "[Errno 22]": the kind of file says it


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular_fd(path: str | Path, *, follow_symlinks: bool = False) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only as a descriptor, with its status; ``NotARegularFile`` at once for
    anything but a regular file (``FileNotFoundError`` as usual when it is gone).

    ``O_NONBLOCK`` makes opening a named pipe return instead of waiting for a writer (cleared
    again before any read); ``O_NOFOLLOW`` (unless ``follow_symlinks``) refuses a symbolic link
    put in the file's place: the store never makes one. Costs one ``fstat`` and two ``fcntl``
    calls over a plain open."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise NotARegularFile(errno.ELOOP, "a symbolic link, not a regular file", str(path)) from None
        raise
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise NotARegularFile(errno.EINVAL, f"{_kind(status.st_mode)}, not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, status


def open_regular(path: str | Path, *, follow_symlinks: bool = False, buffering: int = 0) -> BinaryIO:
    """``open(path, "rb")`` refusing anything but a regular file (see ``open_regular_fd``)."""
    fd, _ = open_regular_fd(path, follow_symlinks=follow_symlinks)
    try:
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise
