"""Import a reference store's data directory: users (token hashes), brains and their history.

Layout read (the reference store's)::

    users.json                              users: a JSON array, ``{"users": [...]}``, or an object
                                            keyed by user id; each with id, name, email, the token's
                                            SHA-256 hex and created_at
    brains/<user>/<brain>/meta.json         id, name, created_at, checksum, size_bytes, file_count,
                                            last_synced_at
    brains/<user>/<brain>/current.bin       the current archive
    brains/<user>/<brain>/versions/<n>.bin  snapshots (names sort oldest first)

Archives are plain (gzip) or sealed by the reference with its master key. The spec does
not fix the reference's sealed layout; we assume AES-256-GCM under the master key itself,
no associated data, stored as ``IV (12) | ciphertext | tag (16)``, and also accept
``IV (12) | tag (16) | ciphertext``: each layout is tried and the one whose tag verifies wins.

Every archive is decrypted (streaming, to a temporary file), re-hashed and validated like
an upload, then stored through the ``StorageBackend`` interface, sealed in our own format
when this store has encryption on. Users and brains that already exist are skipped, so
running the import again changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

from store.backup.apply import BrainBuilder, is_partial
from store.storage.base import SAFE_ID, ArchiveRef, BrainMeta, Snapshot

CHUNK = 1024 * 1024
IV_SIZE = 12
TAG_SIZE = 16
_GZIP = b"\x1f\x8b"
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}\Z")
_VERSION_FORMAT = "%Y%m%dT%H%M%S.%fZ"  # our snapshot names (store.service)
_TOKEN_FIELDS = ("token_hash", "tokenHash", "token_sha256", "tokenSha256", "token_digest", "hash")


class ReferenceImportError(Exception):
    """The reference directory cannot be imported as a whole (nothing was changed)."""


@dataclass
class RefUser:
    """One user of the reference store."""

    id: str
    name: str
    email: str
    token_sha256: str
    created_at: str


@dataclass
class ImportReport:
    """What the import did, for the operator."""

    users_added: list[str] = field(default_factory=list)
    users_present: list[str] = field(default_factory=list)
    brains_added: list[str] = field(default_factory=list)
    brains_present: list[str] = field(default_factory=list)
    archives: int = 0
    warnings: list[str] = field(default_factory=list)


# -- pure parsing -------------------------------------------------------------------


def _field(record: dict[str, Any], *names: str) -> Any:
    for name in names:
        if record.get(name) not in (None, ""):
            return record[name]
    return None


def parse_users(text: str) -> list[RefUser]:
    """The users of a reference ``users.json`` (array, ``{"users": ...}`` or an object keyed by id)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ReferenceImportError(f"users.json is not JSON ({exc})") from None
    if isinstance(doc, dict) and "users" in doc:
        doc = doc["users"]
    if isinstance(doc, dict):
        records = [{"id": key, **value} if isinstance(value, dict) else value for key, value in doc.items()]
    elif isinstance(doc, list):
        records = doc
    else:
        raise ReferenceImportError("users.json holds neither a list nor an object of users")
    users: list[RefUser] = []
    for record in records:
        if not isinstance(record, dict):
            raise ReferenceImportError(f"users.json: a user is not an object: {str(record)[:60]!r}")
        user_id = str(_field(record, "id", "user_id", "userId") or "")
        if not SAFE_ID.match(user_id):
            raise ReferenceImportError(f"users.json: unusable user id {user_id[:80]!r}")
        token = str(_field(record, *_TOKEN_FIELDS) or "")
        if token and not _HEX64.match(token):
            raise ReferenceImportError(f"users.json: user {user_id}: the token hash is not 64 hex digits")
        users.append(
            RefUser(
                id=user_id.lower() if re.fullmatch(r"[0-9A-Fa-f-]{36}", user_id) else user_id,
                name=str(_field(record, "name", "username") or user_id),
                email=str(_field(record, "email") or ""),
                token_sha256=token.lower(),
                created_at=str(_field(record, "created_at", "createdAt") or ""),
            )
        )
    return users


def version_moment(name: str, fallback: datetime) -> datetime:
    """When a reference snapshot was taken, read from its name when it looks like a time."""
    digits = re.findall(r"\d+", name)
    try:
        if len(digits) == 1 and len(digits[0]) in (10, 13, 16):  # epoch s / ms / µs
            scale = {10: 1, 13: 1_000, 16: 1_000_000}[len(digits[0])]
            return datetime.fromtimestamp(int(digits[0]) / scale, UTC)
        if len(digits) == 1 and len(digits[0]) >= 14:  # 20260102030405[ffffff]
            d = digits[0]
            digits = [d[0:4], d[4:6], d[6:8], d[8:10], d[10:12], d[12:14]] + ([d[14:]] if len(d) > 14 else [])
        if len(digits) >= 6 and len(digits[0]) == 4:
            y, mo, dd, h, mi, s = (int(x) for x in digits[:6])
            micro = int((digits[6] + "000000")[:6]) if len(digits) > 6 else 0
            return datetime(y, mo, dd, h, mi, s, micro, tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        pass
    return fallback


def snapshot_names(moments: list[datetime]) -> list[str]:
    """Our snapshot names for moments given oldest first: strictly increasing, like the store's."""
    names: list[str] = []
    for moment in moments:
        if names:
            last = datetime.strptime(names[-1], _VERSION_FORMAT).replace(tzinfo=UTC)
            if moment <= last:
                moment = last + timedelta(microseconds=1)
        names.append(moment.strftime(_VERSION_FORMAT))
    return names


def rfc3339(moment: datetime) -> str:
    """RFC 3339 UTC with microseconds, as the store writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def _normal_time(text: Any, fallback: datetime) -> str:
    if isinstance(text, str) and text:
        try:
            return rfc3339(datetime.fromisoformat(text.replace("Z", "+00:00")))
        except ValueError:
            pass
    return rfc3339(fallback)


# -- decrypting the reference's sealed files ---------------------------------------


def _decrypt_to(path: Path, key: bytes, tag_last: bool, out: BinaryIO) -> bool:
    """Stream-decrypt one layout into ``out``; False when the tag does not verify."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    size = path.stat().st_size
    if size < IV_SIZE + TAG_SIZE:
        return False
    with open(path, "rb") as f:
        iv = f.read(IV_SIZE)
        if tag_last:
            f.seek(size - TAG_SIZE)
            tag = f.read(TAG_SIZE)
            f.seek(IV_SIZE)
        else:
            tag = f.read(TAG_SIZE)
        remaining = size - IV_SIZE - TAG_SIZE
        decryptor = Cipher(algorithms.AES(key), modes.GCM(iv, tag)).decryptor()
        out.seek(0)
        out.truncate()
        while remaining:
            chunk = f.read(min(CHUNK, remaining))
            if not chunk:
                return False
            remaining -= len(chunk)
            out.write(decryptor.update(chunk))
        try:
            decryptor.finalize()
        except InvalidTag:
            return False
    return True


def plaintext_of(path: Path, key: bytes | None, scratch: Path) -> tuple[Path, bool]:
    """A plain archive file for reference file ``path`` and whether it was sealed."""
    with open(path, "rb") as f:
        head = f.read(2)
    if head == _GZIP:
        return path, False
    if key is None:
        raise ValueError("is not a gzip archive; if the reference encrypted it, pass its key with --key")
    plain = scratch / "plain"
    with open(plain, "wb") as out:
        for tag_last in (True, False):
            if _decrypt_to(path, key, tag_last, out):
                out.flush()
                return plain, True
    raise ValueError("cannot be decrypted with the given key (tried IV|ciphertext|tag and IV|tag|ciphertext)")


# -- importing ------------------------------------------------------------------------


@dataclass
class _Archive:
    plain: Path
    checksum: str
    size: int
    file_count: int


def _examine(plain: Path, limits: Any) -> _Archive:
    """Hash, size and validate a plain archive (the same inspection as an upload)."""
    from store.archive.inspect import ArchiveInspector

    inspector = ArchiveInspector(limits)
    digest = hashlib.sha256()
    size = 0
    with open(plain, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            inspector.feed(chunk)
            size += len(chunk)
    summary = inspector.finish()
    return _Archive(plain=plain, checksum=digest.hexdigest(), size=size, file_count=summary.file_count)


def _writer(plain: Path, checksum: str, sealer: Any, user_id: str, brain_id: str) -> Callable[[BinaryIO], None]:
    def write(out: BinaryIO) -> None:
        seal = sealer.writer(out, user_id, brain_id) if sealer is not None else None
        with open(plain, "rb") as f:
            while chunk := f.read(CHUNK):
                if seal is not None:
                    seal.write(chunk)
                else:
                    out.write(chunk)
        if seal is not None:
            seal.close(checksum)

    return write


def _brain_dirs(ref: Path) -> Iterator[tuple[str, Path]]:
    root = ref / "brains"
    if not root.is_dir():
        return
    for user_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for brain_dir in sorted(p for p in user_dir.iterdir() if p.is_dir()):
            yield user_dir.name, brain_dir


def import_reference(
    ref: Path,
    backend: Any,
    registry: Any,
    *,
    ref_key: bytes | None,
    sealer: Any,
    limits: Any,
    progress: Callable[[str], None] = lambda line: None,
) -> ImportReport:
    """Import users and brains of the reference data directory ``ref`` (see the module doc)."""
    from store.auth.users import User

    ref = Path(ref)
    users_file = ref / "users.json"
    if not users_file.is_file():
        raise ReferenceImportError(f"{ref}: no users.json; is it a reference store's data directory?")
    ref_users = parse_users(users_file.read_text(encoding="utf-8"))
    report = ImportReport()

    # users first, in one locked edit; any conflict refuses the whole import before a change
    def merge(doc: Any) -> None:
        by_id = {u.id: u for u in doc.users}
        names = {u.name: u.id for u in doc.users}
        hashes = {u.token_sha256: u.id for u in doc.users if u.token_sha256}
        adding: list[Any] = []
        for ru in ref_users:
            if ru.id in by_id:
                report.users_present.append(ru.name)
                continue
            if names.get(ru.name, ru.id) != ru.id:
                raise ReferenceImportError(f"this store already has a different user named {ru.name!r}; nothing imported")
            if ru.token_sha256 and hashes.get(ru.token_sha256, ru.id) != ru.id:
                raise ReferenceImportError(f"user {ru.name!r}: another user here has the same token; nothing imported")
            created = _normal_time(ru.created_at, datetime.now(UTC))
            adding.append(User(id=ru.id, name=ru.name, created_at=created, email=ru.email,
                               token_sha256=ru.token_sha256))
            names[ru.name] = ru.id
            report.users_added.append(ru.name)
        doc.users.extend(adding)

    registry.edit(merge)
    for name in report.users_added:
        progress(f"user {name}: imported (existing token keeps working)")
    for name in report.users_present:
        progress(f"user {name}: already present, skipped")

    known = {u.id for u in ref_users}
    for user_dir_name, brain_dir in _brain_dirs(ref):
        label = f"{user_dir_name}/{brain_dir.name}"
        try:
            done = _import_brain(brain_dir, user_dir_name, known, backend, ref_key, sealer, limits, report, progress)
        except (ValueError, OSError) as exc:
            report.warnings.append(f"brain {label}: {exc}; skipped")
            progress(f"brain {label}: {exc}; skipped")
            continue
        (report.brains_added if done else report.brains_present).append(label)
    return report


def _import_brain(
    brain_dir: Path, user_id: str, known: set[str], backend: Any, ref_key: bytes | None, sealer: Any,
    limits: Any, report: ImportReport, progress: Callable[[str], None],
) -> bool:
    from store.archive.inspect import ArchiveRejected

    user_id = user_id.lower() if re.fullmatch(r"[0-9A-Fa-f-]{36}", user_id) else user_id
    if user_id not in known:
        raise ValueError("its user is not in users.json")
    meta_file = brain_dir / "meta.json"
    record = json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.is_file() else {}
    if not isinstance(record, dict):
        raise ValueError("meta.json is not an object")
    brain_id = str(record.get("id") or brain_dir.name).lower()
    if not re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", brain_id):
        raise ValueError(f"brain id {brain_id[:80]!r} is not a UUID")
    label = f"{user_id}/{brain_id}"
    existing = backend.read_meta(user_id, brain_id)
    if existing is not None and not is_partial(existing):
        progress(f"brain {label}: already present, skipped")
        return False
    versions = sorted((brain_dir / "versions").glob("*.bin")) if (brain_dir / "versions").is_dir() else []
    current = brain_dir / "current.bin"
    with tempfile.TemporaryDirectory(prefix="brain-store-import-") as scratch_dir:
        scratch = Path(scratch_dir)
        # decrypt and check everything first, so a bad file leaves no half-imported brain
        found: list[tuple[Path, _Archive, bool]] = []
        for i, path in enumerate([*versions, *([current] if current.is_file() else [])]):
            work = scratch / str(i)
            work.mkdir()
            try:
                plain, was_sealed = plaintext_of(path, ref_key, work)
                found.append((path, _examine(plain, limits), was_sealed))
            except (ValueError, ArchiveRejected) as exc:
                raise ValueError(f"{path.relative_to(brain_dir)} {exc}") from None
        created = _normal_time(record.get("created_at"), _mtime(meta_file) if meta_file.is_file() else datetime.now(UTC))
        snaps_in = [(p, a, s) for p, a, s in found if p != current]
        names = snapshot_names([version_moment(p.stem, _mtime(p)) for p, _, _ in snaps_in])
        refs: dict[Path, ArchiveRef] = {}
        for path, archive, was_sealed in found:
            synced = (_normal_time(record.get("last_synced_at"), _mtime(path)) if path == current
                      else rfc3339(_mtime(path)))
            refs[path] = ArchiveRef(checksum=archive.checksum, size=archive.size, file_count=archive.file_count,
                                    synced_at=synced, sealed=sealer is not None)
        if current.is_file():
            want = str(record.get("checksum") or "")
            got = refs[current].checksum
            if want and want.lower() != got:
                report.warnings.append(f"brain {label}: meta.json says checksum {want}, the archive has {got}")
                progress(f"brain {label}: warning: meta.json checksum differs from the archive; using {got}")
        snapshots = tuple(
            Snapshot(name=name, date=rfc3339(datetime.strptime(name, _VERSION_FORMAT).replace(tzinfo=UTC)),
                     archive=refs[p])
            for name, (p, _, _) in zip(names, snaps_in, strict=True)
        )
        meta = BrainMeta(id=brain_id, user_id=user_id, name=str(record.get("name") or "default")[:100],
                         created_at=created, current=refs.get(current), snapshots=snapshots)
        builder = BrainBuilder(backend, meta, replace=existing is not None)  # finish an interrupted import
        for path, archive, _ in found:
            if builder.wants(archive.checksum):
                builder.add(archive.checksum, _writer(archive.plain, archive.checksum, sealer, user_id, brain_id),
                            refs[path])
                report.archives += 1
        builder.finish()
    sealed_count = sum(1 for _, _, s in found if s)
    progress(
        f"brain {label} ({meta.name}): imported; current {'yes' if meta.current else 'none'}, "
        f"{len(snapshots)} snapshot(s), {sealed_count} were sealed by the reference"
        + ("; re-sealed with this store's key" if sealer is not None else "")
    )
    return True
