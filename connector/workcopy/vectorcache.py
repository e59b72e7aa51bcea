"""The command line's vector cache: a brain directory's vectors kept between runs.

`brain-connector recall --mode hybrid` and `similar` embed every memory of the brain they
read; a second call on an unchanged brain should embed nothing. They keep the vectors
the way the connector keeps them in its state directory (`VectorStore` segments, keyed
by content, sealed with AES-256-GCM), in a cache directory: ``--cache-dir``, by default
``$XDG_CACHE_HOME/brain-store`` (else ``~/.cache/brain-store``). The directory is 0700 and
holds its own random key (``key``, 0600): deleting it is always safe (vectors are then
computed again), and so is a damaged segment: it is removed when read, its vectors computed
again. A directory that cannot be used (read-only, not writable) costs only that:
the command line answers, computing the vectors for that run.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from common.docstore import DocumentStore, DocumentStoreError, open_document_store
from connector.workcopy.vectors import VectorStore, e5_store, judge_store

_KEY_FILE = "key"
_KEY_BYTES = 32


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/brain-store``, else ``~/.cache/brain-store`` (also for an empty or relative
    ``XDG_CACHE_HOME``: the XDG base directory spec says to ignore it, as the cache would otherwise
    move with the working directory)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "brain-store"


def _cache_key(directory: Path) -> bytes:
    """The cache's own key, made on first use (0600; another process racing us wins once)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / _KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) == _KEY_BYTES:
            return key
        # A damaged key: the segments sealed under it cannot be opened anyway.
        path.unlink()
        return _cache_key(directory)
    with os.fdopen(fd, "wb") as stream:
        stream.write(secrets.token_bytes(_KEY_BYTES))
    return path.read_bytes()


class CacheDirError(Exception):
    """The cache directory cannot be used (not writable, not a directory)."""


def cached_stores(
    directory: Path | None, *, e5: bool = True, judge: bool = False, on_unusable: Callable[[str], None] | None = None
) -> tuple[VectorStore, VectorStore | None, VectorStore | None]:
    """The USE store, the e5 store (None where the e5 engine cannot load, or without ``e5``) and,
    with ``judge``, the judge's store beside e5's (None without e5), kept in ``directory`` (None:
    the default cache directory). The judge's model loads only when it is asked to embed.

    A directory that cannot be used (read-only, not a directory) raises ``CacheDirError``; with
    ``on_unusable`` it is reported there instead and the stores keep vectors in memory only."""
    directory = directory or default_cache_dir()
    state: DocumentStore | None
    key: bytes | None
    try:
        state = open_document_store(directory)
        key = _cache_key(directory)
    except (OSError, DocumentStoreError) as exc:
        problem = f"cannot use the vector cache directory {directory}: {getattr(exc, 'strerror', None) or exc}"
        if on_unusable is None:
            raise CacheDirError(problem) from None
        # The cache only saves time: an answer computed without it is the same answer.
        on_unusable(f"{problem}; vectors are computed for this run only")
        state, key = None, None
    # Only this cache's own key writes here: a segment it cannot open is damaged for good.
    use = VectorStore(state=state, state_key=key, prune_unreadable=True)
    e5_vectors = e5_store(state, key, prune_unreadable=True) if e5 else None
    judged = judge_store(state, key, prune_unreadable=True) if judge and e5_vectors is not None else None
    return use, e5_vectors, judged
