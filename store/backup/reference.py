"""Import a reference store's data directory: users (token hashes), brains and their snapshots.

Layout read (the reference store's own; see docs/backup.md)::

    users.json                                  {"users": [{id, name, email, token_sha256, created_at, ...}]}
    brains/<user id>/<brain id>/meta.json       {id, user_id, name, size_bytes, file_count,
                                                 last_synced_at, checksum, created_at}
    brains/<user id>/<brain id>/current.bin     the live archive (absent until the first upload)
    brains/<user id>/<brain id>/versions/<YYYYMMDD>T<HHMMSS>.<9 digits>.tar.gz
                                                one snapshot per overwrite (plain or sealed)

A file is plain (gzip) unless it starts with the reference's magic ``BSTORE1\\0``; then it is
``magic (8) | nonce (12) | ciphertext | GCM tag (16)``: AES-256-GCM without associated data,
under a per-user key HKDF-SHA256(master key, salt empty, info ``"brain-store:" + user id``).
One directory may mix both.

The import runs in two passes so that a bad file changes nothing:

1. ``survey``: read users.json and every meta.json, open every archive (decrypting sealed
   ones), hash and inspect it like an upload, and check the users against this store's.
   The first problem ends the import with an error naming the file; nothing was written.
2. write: every brain missing here is built (sealed in this store's format when it has a
   key), its snapshots keeping their reference names; then the users are added in one
   locked edit, so imported tokens start working once every brain is in place.

Users and brains already here are left as they are, so running the import again adds only
what is missing (nothing, after a complete run); a brain left half-built by an interrupted
run is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from common.files import NotARegularFile, open_regular
from common.textsafety import escape_one_line
from store.auth.users import email_problem, name_problem, with_email
from store.backup.apply import BrainBuilder, is_partial
from store.storage.base import SAFE_ID, ArchiveRef, BrainMeta, Snapshot

CHUNK = 1024 * 1024
# The reference writes a few hundred bytes a user and a brain: a larger file is not its own (or
# is damaged), and reading it whole could take all the memory.
MAX_USERS_BYTES = 64 * 1024 * 1024
MAX_META_BYTES = 1024 * 1024
REF_MAGIC = b"BSTORE1\x00"
NONCE_SIZE = 12
TAG_SIZE = 16
# The reference's snapshot file names: the snapshot's UTC time with a nanosecond field.
SNAPSHOT_NAME = re.compile(r"^(\d{8}T\d{6})\.(\d{9})\.tar\.gz\Z")
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


class ReferenceImportError(Exception):
    """The reference directory cannot be imported; nothing was changed."""


class _TagMismatch(Exception):
    """A sealed reference file did not authenticate under the key given."""


@dataclass(frozen=True)
class RefUser:
    """One user of the reference store."""

    id: str
    name: str
    email: str
    token_sha256: str
    created_at: str


@dataclass(frozen=True)
class RefArchive:
    """One archive file of the reference, checked: where it is and what its plaintext is."""

    path: Path
    rel: str  # its path inside the reference directory, for messages
    sealed: bool
    checksum: str
    size: int
    file_count: int


@dataclass
class RefBrain:
    """One brain of the reference with every archive checked, ready to be written."""

    user_id: str
    brain_id: str
    name: str
    created_at: str
    current: RefArchive | None
    current_synced_at: str
    snapshots: list[tuple[str, str, RefArchive]]  # (name, date, archive), oldest first
    orphan: bool  # its user is not in users.json (removed at the reference without --purge)

    @property
    def label(self) -> str:
        """``user/brain`` for messages."""
        return f"{self.user_id}/{self.brain_id}"

    def archives(self) -> list[RefArchive]:
        """Every archive file of the brain, snapshots first."""
        return [a for _, _, a in self.snapshots] + ([self.current] if self.current else [])

    def meta(self, sealed: bool) -> BrainMeta:
        """The metadata this brain gets here (``sealed``: stored in this store's sealed format)."""

        def ref(a: RefArchive, synced_at: str) -> ArchiveRef:
            return ArchiveRef(checksum=a.checksum, size=a.size, file_count=a.file_count, synced_at=synced_at,
                              sealed=sealed)

        return BrainMeta(
            id=self.brain_id, user_id=self.user_id, name=self.name, created_at=self.created_at,
            current=ref(self.current, self.current_synced_at) if self.current else None,
            snapshots=tuple(Snapshot(name=n, date=d, archive=ref(a, d)) for n, d, a in self.snapshots),
        )


@dataclass
class Survey:
    """Everything the reference directory holds, checked; nothing written yet."""

    users: list[RefUser]
    brains: list[RefBrain]
    warnings: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    """What the import did, for the operator."""

    users_added: list[str] = field(default_factory=list)
    users_present: list[str] = field(default_factory=list)
    brains_added: list[str] = field(default_factory=list)
    brains_present: list[str] = field(default_factory=list)
    archives: int = 0
    sealed_by_reference: int = 0
    warnings: list[str] = field(default_factory=list)


# -- pure parts ----------------------------------------------------------------------


def parse_users(text: str) -> list[RefUser]:
    """The users of a reference ``users.json`` (``{"users": [...]}``)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ReferenceImportError(f"users.json is not JSON ({exc}); nothing imported") from None
    except RecursionError:
        raise ReferenceImportError("users.json is nested too deeply to be a users file; nothing imported") from None
    records = doc.get("users") if isinstance(doc, dict) else None
    if not isinstance(records, list):
        raise ReferenceImportError('users.json has no "users" list; nothing imported')
    users: list[RefUser] = []
    for record in records:
        if not isinstance(record, dict):
            raise ReferenceImportError(f"users.json: a user is not an object: {str(record)[:60]!r}; nothing imported")
        user_id = str(record.get("id") or "")
        if not SAFE_ID.match(user_id):
            raise ReferenceImportError(f"users.json: unusable user id {user_id[:80]!r}; nothing imported")
        token = str(record.get("token_sha256") or "").lower()
        if token and not _HEX64.match(token):
            raise ReferenceImportError(f"users.json: user {user_id}: token_sha256 is not 64 hex digits; "
                                       "nothing imported")
        users.append(RefUser(id=user_id, name=str(record.get("name") or user_id), email=str(record.get("email") or ""),
                             token_sha256=token, created_at=str(record.get("created_at") or "")))
    return users


def reference_user_key(master: bytes, user_id: str) -> bytes:
    """The reference store's per-user key: HKDF-SHA256(master, salt empty, info "brain-store:" + id)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"", info=f"brain-store:{user_id}".encode()).derive(master)


def snapshot_date(name: str) -> str | None:
    """The RFC 3339 time of a reference snapshot file name, or None when the name is not one."""
    match = SNAPSHOT_NAME.match(name)
    if match is None:
        return None
    try:
        moment = datetime.strptime(f"{match[1]}.{match[2][:6]}", "%Y%m%dT%H%M%S.%f").replace(tzinfo=UTC)
    except ValueError:
        return None
    return rfc3339(moment)


def rfc3339(moment: datetime) -> str:
    """RFC 3339 UTC with microseconds, as the store writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _normal_time(text: Any, fallback: datetime) -> str:
    if isinstance(text, str) and text:
        try:
            return rfc3339(datetime.fromisoformat(text.replace("Z", "+00:00")))
        except ValueError:
            pass
    return rfc3339(fallback)


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.lstat().st_mtime, UTC)


# -- reading the directory: its own files only ---------------------------------------------
# The reference makes no symbolic links, named pipes or devices. Followed, a link reads files
# outside the directory into a user's brain; a pipe without a writer would hang the import.


def _is_dir(path: Path, rel: str) -> bool:
    """Whether ``path`` is a directory (False when absent or some other file); a symbolic link is refused."""
    try:
        status = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise ReferenceImportError(f"{rel} cannot be read ({exc.strerror or exc}); nothing imported") from None
    if stat.S_ISLNK(status.st_mode):
        raise ReferenceImportError(f"{rel} is a symbolic link (the reference store makes none, and it could "
                                   "lead out of the directory); nothing imported")
    return stat.S_ISDIR(status.st_mode)


def _listing(directory: Path, rel: str) -> list[Path]:
    """The entries of ``directory``, sorted."""
    try:
        return sorted(directory.iterdir())
    except OSError as exc:
        raise ReferenceImportError(f"{rel} cannot be listed ({exc.strerror or exc}); nothing imported") from None


def _subdirs(directory: Path, rel: str) -> list[Path]:
    """The directories in ``directory``, sorted (other files are not the reference's: ignored;
    a symbolic link is refused)."""
    return [p for p in _listing(directory, rel) if _is_dir(p, f"{rel}/{p.name}")]


def _unreadable(rel: str, exc: OSError) -> ReferenceImportError:
    if isinstance(exc, NotARegularFile):
        return ReferenceImportError(f"{rel} is {exc.strerror}; nothing imported")
    return ReferenceImportError(f"{rel} cannot be read ({exc.strerror or exc}); nothing imported")


def _read_small(path: Path, rel: str, limit: int) -> bytes | None:
    """The bytes of a small file (None when absent), refused when it is not a regular file or is
    larger than ``limit``."""
    try:
        with open_regular(path, buffering=-1) as f:
            data = f.read(limit + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _unreadable(rel, exc) from None
    if len(data) > limit:
        raise ReferenceImportError(f"{rel} is larger than {limit // (1024 * 1024)} MiB, too large to be the "
                                   "reference store's; nothing imported")
    return data


# -- reading archive files -------------------------------------------------------------


def _chunks(f: BinaryIO, key: bytes | None) -> Iterator[bytes]:
    """The plaintext of the opened archive ``f`` (sealed under ``key``, or plain when None), streamed
    and closing ``f``; a sealed one raises ``_TagMismatch`` after the last chunk when it does not
    authenticate (so a consumer must not trust it before the end)."""
    with f:
        if key is None:
            f.seek(0)
            while chunk := f.read(CHUNK):
                yield chunk
            return
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        size = os.fstat(f.fileno()).st_size
        if size < len(REF_MAGIC) + NONCE_SIZE + TAG_SIZE:
            raise _TagMismatch()
        f.seek(size - TAG_SIZE)
        tag = f.read(TAG_SIZE)
        f.seek(len(REF_MAGIC))
        nonce = f.read(NONCE_SIZE)
        decryptor = Cipher(algorithms.AES(key), modes.GCM(nonce, tag)).decryptor()
        remaining = size - len(REF_MAGIC) - NONCE_SIZE - TAG_SIZE
        while remaining:
            chunk = f.read(min(CHUNK, remaining))
            if not chunk:
                raise _TagMismatch()
            remaining -= len(chunk)
            yield decryptor.update(chunk)
        try:
            decryptor.finalize()
        except InvalidTag:
            raise _TagMismatch() from None


def plaintext(path: Path, user_id: str, master: bytes | None, rel: str) -> tuple[bool, Iterator[bytes]]:
    """Whether ``path`` is sealed, and its plaintext chunks (see ``_chunks``). The file is opened
    once, as a regular file only (``NotARegularFile``, an OSError, for anything else)."""
    f = open_regular(path, buffering=-1)
    try:
        sealed = f.read(len(REF_MAGIC)) == REF_MAGIC
        if sealed and master is None:
            raise ReferenceImportError(f"{rel} is sealed by the reference store: give the reference's "
                                       "STORE_ENCRYPTION_KEY with --key or REFERENCE_ENCRYPTION_KEY; nothing imported")
    except BaseException:
        f.close()
        raise
    return sealed, _chunks(f, reference_user_key(master, user_id) if sealed and master is not None else None)


def _examine(path: Path, rel: str, user_id: str, master: bytes | None, limits: Any) -> RefArchive:
    """Hash, size and inspect one archive file (the same inspection as an upload)."""
    from store.archive.inspect import ArchiveInspector, ArchiveRejected

    inspector = ArchiveInspector(limits)
    digest = hashlib.sha256()
    size = 0
    rejected: ArchiveRejected | None = None
    file_count = 0
    try:
        sealed, chunks = plaintext(path, user_id, master, rel)
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
            if rejected is None:
                try:
                    inspector.feed(chunk)
                except ArchiveRejected as exc:
                    rejected = exc  # keep decrypting: a wrong key must be named as such
        if rejected is None:
            file_count = inspector.finish().file_count
    except _TagMismatch:
        raise ReferenceImportError(f"{rel} cannot be decrypted with the reference key given (wrong key, or "
                                   "the file is damaged); nothing imported") from None
    except ArchiveRejected as exc:
        rejected = exc
    except OSError as exc:
        raise _unreadable(rel, exc) from None
    if rejected is not None:
        raise ReferenceImportError(f"{rel} is not a valid brain archive ({rejected.message}); nothing imported")
    return RefArchive(path=path, rel=rel, sealed=sealed, checksum=digest.hexdigest(), size=size,
                      file_count=file_count)


# -- pass 1: survey ------------------------------------------------------------------


def survey(ref: Path, master: bytes | None, limits: Any, present: list[Any],
           progress: Callable[[str], None] = lambda line: None) -> Survey:
    """Read and check the whole reference directory ``ref`` against this store's users ``present``.

    Raises ``ReferenceImportError`` naming the first file or user that cannot be imported.
    """
    ref = Path(ref)
    data = _read_small(ref / "users.json", "users.json", MAX_USERS_BYTES)
    if data is None:
        raise ReferenceImportError(f"{ref}: no users.json; is it a reference store's data directory?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReferenceImportError(f"users.json cannot be read ({exc}); nothing imported") from None
    users = parse_users(text)
    check_users(users, present)
    result = Survey(users=users, brains=[])
    known = {u.id for u in users}
    root = ref / "brains"
    user_dirs = _subdirs(root, "brains") if _is_dir(root, "brains") else []
    for user_dir in user_dirs:
        if not SAFE_ID.match(user_dir.name):
            raise ReferenceImportError(f"brains/{user_dir.name}: not a user id; nothing imported")
        for brain_dir in _subdirs(user_dir, f"brains/{user_dir.name}"):
            brain = _survey_brain(ref, brain_dir, user_dir.name, master, limits, result.warnings)
            brain.orphan = brain.user_id not in known
            if brain.orphan:
                result.warnings.append(f"brain {brain.label}: its user is not in users.json (removed at the "
                                       "reference); kept as a brain of a removed user (`brain-store user orphans`)")
            result.brains.append(brain)
            progress(f"checked brain {brain.label}: {len(brain.archives())} archive(s)")
    return result


def check_users(users: list[RefUser], present: list[Any]) -> None:
    """Refuse users that clash with different users of this store (same name or same token)."""
    ids = {u.id for u in present}
    names = {u.name: u.id for u in present}
    hashes = {u.token_sha256: u.id for u in present if u.token_sha256}
    for ru in users:
        if ru.id in ids:
            continue
        if names.get(ru.name, ru.id) != ru.id:
            raise ReferenceImportError(f"users.json: this store already has a different user named {ru.name!r}; "
                                       "nothing imported")
        if ru.token_sha256 and hashes.get(ru.token_sha256, ru.id) != ru.id:
            raise ReferenceImportError(f"users.json: user {ru.name!r} has the token of another user of this "
                                       "store; nothing imported")
        problem = name_problem(ru.name, [*present, *users], ru.id) or email_problem(ru.email)
        if problem is None and any(other.id != ru.id for other in with_email(ru.email, [*present, *users])):
            problem = f"another user has the e-mail address {ru.email!r}"
        if problem is not None:
            raise ReferenceImportError(f"users.json: user {ru.id}: {escape_one_line(problem)}; nothing imported")


def check_brains(plan: Survey, backend: Any, present: list[Any], *, into_existing: bool) -> None:
    """Refuse brains that would take over or slip into an account of this store.

    A brain id is one brain: an id another user here already has (or two reference users
    share) is refused, never renamed, since clients and shares name the brain by it. A brain
    that would be added to an account already here (same user id) needs ``into_existing``.
    """
    owners: dict[str, str] = {}
    for user_id in backend.iter_users():
        for meta in backend.list_brains(user_id):
            owners[meta.id] = user_id
    accounts = {u.id: u.name for u in present}
    planned: dict[str, str] = {}
    for brain in plan.brains:
        holder = owners.get(brain.brain_id, planned.get(brain.brain_id, brain.user_id))
        if holder != brain.user_id:
            raise ReferenceImportError(f"brain {brain.label}: this store already has a brain with id "
                                       f"{brain.brain_id} belonging to another user; nothing imported")
        planned[brain.brain_id] = brain.user_id
        if brain.user_id in accounts and brain.brain_id not in owners and not into_existing:
            raise ReferenceImportError(
                f"brain {brain.label}: user {accounts[brain.user_id]!r} already has an account here and the "
                "import would add this brain to it; pass --into-existing to do that; nothing imported")


def _survey_brain(ref: Path, brain_dir: Path, user_id: str, master: bytes | None, limits: Any,
                  warnings: list[str]) -> RefBrain:
    rel_dir = brain_dir.relative_to(ref).as_posix()
    if (brain_dir / "blobs").is_dir():
        # this store's own layout: its archives are in blobs/, which a reference import never
        # reads, so every brain would arrive empty while its users' tokens worked
        raise ReferenceImportError(f"{rel_dir}/blobs: this is a brain-store data directory, not a reference "
                                   "store's; move it with `brain-store backup` and `restore` (or `migrate`); "
                                   "nothing imported")
    meta_file = brain_dir / "meta.json"
    record: Any = {}
    meta_data = _read_small(meta_file, f"{rel_dir}/meta.json", MAX_META_BYTES)
    if meta_data is not None:
        try:
            record = json.loads(meta_data.decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError included
            raise ReferenceImportError(f"{rel_dir}/meta.json is not JSON ({exc}); nothing imported") from None
        except RecursionError:
            raise ReferenceImportError(f"{rel_dir}/meta.json is nested too deeply to be a brain record; "
                                       "nothing imported") from None
        if not isinstance(record, dict):
            raise ReferenceImportError(f"{rel_dir}/meta.json is not an object; nothing imported")
    else:
        warnings.append(f"{rel_dir}: no meta.json; the brain is named 'default'")
    brain_id = str(record.get("id") or brain_dir.name).lower()
    if not _UUID.match(brain_id):
        raise ReferenceImportError(f"{rel_dir}: brain id {brain_id[:80]!r} is not a UUID; nothing imported")
    snapshots: list[tuple[str, str, RefArchive]] = []
    versions = brain_dir / "versions"
    for path in _listing(versions, f"{rel_dir}/versions") if _is_dir(versions, f"{rel_dir}/versions") else []:
        rel = f"{rel_dir}/versions/{path.name}"
        date = snapshot_date(path.name)
        if date is None:  # a snapshot's name that is not a regular file is refused by _examine
            warnings.append(f"{rel}: not a snapshot of the reference store (YYYYMMDDTHHMMSS.NNNNNNNNN.tar.gz); "
                            "ignored")
            continue
        snapshots.append((path.name, date, _examine(path, rel, user_id, master, limits)))
    current_path = brain_dir / "current.bin"
    current = None
    if os.path.lexists(current_path):  # one that is not a regular file is refused, not taken for none
        current = _examine(current_path, f"{rel_dir}/current.bin", user_id, master, limits)
        said = str(record.get("checksum") or "").lower()
        if said and said != current.checksum:
            warnings.append(f"{rel_dir}: meta.json says checksum {said} but current.bin has {current.checksum} "
                            "(the reference can leave them disagreeing after a crash); the archive's is used")
    fallback = _mtime(meta_file) if meta_data is not None else _mtime(brain_dir)
    name = str(record.get("name") or "default")[:100]
    return RefBrain(
        user_id=user_id, brain_id=brain_id, name=name, created_at=_normal_time(record.get("created_at"), fallback),
        current=current,
        current_synced_at=_normal_time(record.get("last_synced_at"), _mtime(current_path) if current else fallback),
        snapshots=snapshots, orphan=False,
    )


# -- pass 2: write ---------------------------------------------------------------------


def _unfinished(existing: BrainMeta, planned: BrainMeta) -> bool:
    """True when ``existing`` is what an interrupted import left: placeholder snapshots, or the
    empty brain created before its first archive (a brain with history is never empty)."""
    empty = existing.current is None and not existing.snapshots
    return is_partial(existing) or (empty and bool(planned.blobs()))


def _read_again(archive: RefArchive, user_id: str, master: bytes | None) -> Iterator[bytes]:
    """The plaintext of an archive the survey checked; a read error is a ``ReferenceImportError``
    (a file replaced since by a named pipe or a link is refused, not followed)."""
    try:
        _, chunks = plaintext(archive.path, user_id, master, archive.rel)
        yield from chunks
    except OSError as exc:
        raise ReferenceImportError(f"{archive.rel} changed during the import ({exc.strerror or exc}); "
                                   "run it again") from None


def _writer(archive: RefArchive, user_id: str, brain_id: str, master: bytes | None,
            sealer: Any) -> Callable[[BinaryIO], None]:
    """Stream ``archive``'s plaintext into a staged blob (sealed when this store seals); checks that
    the bytes are still those the survey checked."""

    def write(out: BinaryIO) -> None:
        seal = sealer.writer(out, user_id, brain_id) if sealer is not None else None
        digest = hashlib.sha256()
        try:
            for chunk in _read_again(archive, user_id, master):
                digest.update(chunk)
                (seal or out).write(chunk)
        except _TagMismatch:
            raise ReferenceImportError(f"{archive.rel} changed during the import; run it again") from None
        if digest.hexdigest() != archive.checksum:
            raise ReferenceImportError(f"{archive.rel} changed during the import; run it again")
        if seal is not None:
            seal.close(archive.checksum)

    return write


def import_reference(
    ref: Path,
    registry: Any,
    open_backend: Callable[[], Any],
    *,
    ref_key: bytes | None,
    sealer: Any,
    limits: Any,
    progress: Callable[[str], None] = lambda line: None,
    into_existing: bool = False,
) -> ImportReport:
    """Import users and brains of the reference data directory ``ref`` (see the module doc).

    ``into_existing``: a reference user who already has an account here may get brains that
    account does not have yet (else that is refused, see ``check_brains``).

    ``open_backend`` is called only once the survey passed, so a refused import leaves even a
    new data directory uncreated.
    """
    if (problem := registry.damaged()) is not None:
        # the users are written last, by an edit a damaged file refuses: the brains would be in
        raise ReferenceImportError(f"{problem}; fix or restore it first; nothing imported")
    plan = survey(ref, ref_key, limits, registry.users(), progress)
    backend = open_backend()
    check_brains(plan, backend, registry.users(), into_existing=into_existing)
    report = ImportReport(warnings=list(plan.warnings))
    for brain in plan.brains:
        meta = brain.meta(sealed=sealer is not None)
        existing = backend.read_meta(brain.user_id, brain.brain_id)
        if existing is not None and not _unfinished(existing, meta):
            report.brains_present.append(brain.label)
            progress(f"brain {brain.label}: already here, left as it is")
            continue
        builder = BrainBuilder(backend, meta, replace=existing is not None)
        for archive in brain.archives():
            if builder.wants(archive.checksum):
                builder.add(archive.checksum, _writer(archive, brain.user_id, brain.brain_id, ref_key, sealer))
                report.archives += 1
        builder.finish()
        sealed_here = sum(1 for a in brain.archives() if a.sealed)
        report.sealed_by_reference += sealed_here
        report.brains_added.append(brain.label)
        progress(f"brain {brain.label} ({brain.name}): imported; current {'yes' if brain.current else 'none'}, "
                 f"{len(brain.snapshots)} snapshot(s), {sealed_here} file(s) sealed by the reference"
                 + ("; sealed with this store's key" if sealer is not None else ""))
    _add_users(plan.users, registry, report)
    for name in report.users_added:
        progress(f"user {name}: imported (their reference token keeps working)")
    for name in report.users_present:
        progress(f"user {name}: already here, left as it is")
    return report


def _add_users(users: list[RefUser], registry: Any, report: ImportReport) -> None:
    """Add the users not here yet in one locked edit (checked again under the lock)."""
    from store.auth.users import User

    present = {u.id for u in registry.users()}
    missing = [u for u in users if u.id not in present]
    report.users_present.extend(u.name for u in users if u.id in present)
    if not missing:
        return  # nothing to write: a re-run leaves users.json untouched

    def merge(doc: Any) -> None:
        check_users(missing, doc.users)
        ids = {u.id for u in doc.users}
        for ru in missing:
            if ru.id in ids:
                continue
            created = _normal_time(ru.created_at, datetime.now(UTC))
            doc.users.append(User(id=ru.id, name=ru.name, created_at=created, email=ru.email,
                                  token_sha256=ru.token_sha256))
            report.users_added.append(ru.name)

    registry.edit(merge)

