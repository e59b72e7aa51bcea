"""The backup file format: names, manifest and errors (pure; no I/O beyond hashing).

A backup is ONE zstandard frame (with its content checksum) holding a POSIX tar stream:

    users.json                                   the users document (token hashes, deny records)
    sharing.json                                 members of shared brains, agent keys (hashes); optional
    sharing-audit/<brain_id>.jsonl               a brain's sharing audit log, one event a line; optional
    brains/<user_id>/<brain_id>/meta.json        that brain's metadata (BrainMeta, as stored)
    brains/<user_id>/<brain_id>/blobs/<sha256>   each archive it names, bytes as stored
    manifest.json                                format, counts, every entry's size and sha256, and
                                                 the brains left out (damaged metadata)
    manifest.sha256                              sha256 hex of manifest.json

A brain's meta.json always precedes its blobs, and the manifest comes last because the
writer only knows the hashes once everything has streamed through.
"""

from __future__ import annotations

import re

import msgspec

FORMAT = "brain-store-backup"
VERSION = 1
USERS = "users.json"
SHARING = "sharing.json"
MANIFEST = "manifest.json"
MANIFEST_SUM = "manifest.sha256"

_UUIDISH = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_META = re.compile(rf"^brains/({_UUIDISH})/({_UUIDISH})/meta\.json\Z")
_AUDIT = re.compile(rf"^sharing-audit/({_UUIDISH})\.jsonl\Z")
_BLOB = re.compile(rf"^brains/({_UUIDISH})/({_UUIDISH})/blobs/([0-9a-f]{{64}})\Z")


class BackupError(Exception):
    """The backup cannot be written, or is corrupt/truncated/not a backup; nothing was changed."""


class Entry(msgspec.Struct, frozen=True):
    """One file in the backup."""

    path: str
    size: int
    sha256: str


class LeftOut(msgspec.Struct, frozen=True):
    """A brain of the store that the backup does not hold: its metadata was damaged when the
    backup was made. A restore leaves the target's brain of that id as it is, where a brain
    merely absent from the backup is removed."""

    user_id: str
    brain_id: str
    reason: str = ""  # what was wrong, as the backup said it (``DamagedBrain.describe``)


class Manifest(msgspec.Struct):
    """What the backup holds; checked entry by entry on restore."""

    format: str
    version: int
    created_at: str
    source: str
    users: int
    brains: int
    archives: int
    sealed_archives: int
    entries: list[Entry]
    # Added within version 1: backups made before it have none (read as []), and an older release
    # reading a newer backup ignores it (unknown fields are skipped), restoring as it always did.
    left_out: list[LeftOut] = msgspec.field(default_factory=list)


def meta_path(user_id: str, brain_id: str) -> str:
    """Path of a brain's metadata in the backup."""
    return f"brains/{user_id}/{brain_id}/meta.json"


def blob_path(user_id: str, brain_id: str, checksum: str) -> str:
    """Path of a stored archive in the backup."""
    return f"brains/{user_id}/{brain_id}/blobs/{checksum}"


def parse_meta_path(path: str) -> tuple[str, str] | None:
    """(user_id, brain_id) of a meta.json path, else None."""
    m = _META.match(path)
    return (m.group(1), m.group(2)) if m else None


def parse_blob_path(path: str) -> tuple[str, str, str] | None:
    """(user_id, brain_id, checksum) of a blob path, else None."""
    m = _BLOB.match(path)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def audit_path(brain_id: str) -> str:
    """Path of a brain's sharing audit log in the backup."""
    return f"sharing-audit/{brain_id}.jsonl"


def parse_audit_path(path: str) -> str | None:
    """The brain id of a sharing audit log path, else None."""
    m = _AUDIT.match(path)
    return m.group(1) if m else None
