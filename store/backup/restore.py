"""Verify a backup completely, then restore it into any backend (local disk or S3).

Restoring reads the file twice. The first pass checks everything and changes nothing:
the zstandard frame checksum, every entry against the manifest (size and sha256), the
manifest against its own checksum, that the users document and each metadata document
decode, and that every archive a brain names is present. Only then does the second
pass write, hashing each entry again (the file could change between passes). A
corrupt or truncated backup is refused by the first pass.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import tarfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import zstandard

from common.files import NotARegularFile, open_regular
from store.backup.apply import BrainBuilder, all_sealed
from store.backup.format import (
    FORMAT,
    MANIFEST,
    MANIFEST_SUM,
    SHARING,
    USERS,
    VERSION,
    BackupError,
    Manifest,
    parse_audit_path,
    parse_blob_path,
    parse_meta_path,
)
from store.storage.base import BrainMeta

CHUNK = 1024 * 1024
_SMALL = 64 * 1024 * 1024  # users.json / meta.json / manifest larger than this are not ours


@dataclass
class Verified:
    """What the first pass learned."""

    manifest: Manifest
    users: Any  # UsersDocument
    metas: dict[tuple[str, str], BrainMeta] = field(default_factory=dict)
    sealed_heads: dict[tuple[str, str, str], bytes] = field(default_factory=dict)
    sharing: Any = None  # SharingDocument, when the backup holds one
    audits: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # brain id -> events


_UNREADABLE = (tarfile.TarError, zstandard.ZstdError, EOFError)


def _unreadable(path: Path, exc: BaseException) -> BackupError:
    return BackupError(f"{path}: not a readable backup ({exc}); truncated or corrupt?")


class _GuardedMember:
    """A member's file object whose read errors are BackupErrors too: the bytes are decompressed
    while the caller reads them, outside ``_members``' own error handling (a byte flipped near
    the end of the file shows up there as a zstd checksum error)."""

    def __init__(self, path: Path, f: BinaryIO) -> None:
        self._path = path
        self._f = f

    def read(self, size: int = -1) -> bytes:
        """Like ``BinaryIO.read``; a damaged stream raises BackupError."""
        try:
            return self._f.read(size)
        except _UNREADABLE as exc:
            raise _unreadable(self._path, exc) from None


def _open_backup(path: Path) -> BinaryIO:
    """The backup file; a named pipe or device is refused at once (opening one without a writer waited
    forever, and a backup is read twice: checked whole, then restored)."""
    try:
        return open_regular(path, follow_symlinks=True, buffering=-1)
    except NotARegularFile as exc:
        raise BackupError(f"{exc}; give the backup file itself (it is read twice: checked, then restored)") from None


def _members(path: Path) -> Iterator[tuple[tarfile.TarInfo, BinaryIO]]:
    """Regular-file members of the backup, streamed; every format error becomes BackupError."""
    try:
        with (
            _open_backup(path) as raw,
            zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=False) as zst,
            tarfile.open(fileobj=zst, mode="r|") as tar,
        ):
            for info in tar:
                if not info.isfile():
                    raise BackupError(f"unexpected non-file entry {info.name!r}")
                f = tar.extractfile(info)
                assert f is not None
                yield info, _GuardedMember(path, f)  # type: ignore[misc]
            # after the end marker only the tar's zero padding may follow (anything else is unchecked data)
            padding = 0
            while chunk := zst.read(CHUNK):
                padding += len(chunk)
                if chunk.strip(b"\0") or padding > 16 * CHUNK:
                    raise BackupError("data after the end of the backup")
    except _UNREADABLE as exc:
        raise _unreadable(path, exc) from None


def _hash_stream(f: BinaryIO, sink: Callable[[bytes], None] | None = None) -> tuple[int, str, bytes]:
    digest = hashlib.sha256()
    size = 0
    head = b""
    while chunk := f.read(CHUNK):
        if size == 0:
            head = chunk[:64]
        digest.update(chunk)
        size += len(chunk)
        if sink is not None:
            sink(chunk)
    return size, digest.hexdigest(), head


def verify_backup(path: Path, progress: Callable[[str], None] = lambda line: None) -> Verified:
    """First pass: check the whole backup; raises ``BackupError`` with the reason."""
    from store.auth.users import USERS_VERSION, UsersDocument

    try:
        _open_backup(path).close()  # a named pipe or device is named as such, not as missing
    except (FileNotFoundError, NotADirectoryError):
        raise BackupError(f"{path}: no such file") from None
    seen: dict[str, tuple[int, str]] = {}
    order: list[str] = []
    smalls: dict[str, bytes] = {}
    heads: dict[str, bytes] = {}
    total = 0
    for info, f in _members(path):
        if info.name in seen:
            raise BackupError(f"entry {info.name!r} appears twice")
        if info.name in (USERS, SHARING, MANIFEST, MANIFEST_SUM) or parse_meta_path(info.name) \
                or parse_audit_path(info.name):
            if info.size > _SMALL:
                raise BackupError(f"entry {info.name!r} is implausibly large")
            data = f.read()
            size, digest = len(data), hashlib.sha256(data).hexdigest()
            smalls[info.name] = data
        elif parse_blob_path(info.name):
            size, digest, head = _hash_stream(f)
            heads[info.name] = head
        else:
            raise BackupError(f"unexpected entry {info.name!r}; is this a brain-store backup?")
        if size != info.size:
            raise BackupError(f"entry {info.name!r} is truncated")
        seen[info.name] = (size, digest)
        order.append(info.name)
        total += size
        if len(order) % 50 == 0:
            progress(f"verified {len(order)} entries ({total} bytes read)")
    if MANIFEST not in smalls or MANIFEST_SUM not in smalls:
        raise BackupError(f"{path}: the manifest is missing; the backup is truncated or not a backup")
    if order[-2:] != [MANIFEST, MANIFEST_SUM]:
        raise BackupError("the manifest is not at the end of the backup")
    body = smalls[MANIFEST]
    want = smalls[MANIFEST_SUM].strip().decode("ascii", "replace")
    if not hmac.compare_digest(hashlib.sha256(body).hexdigest(), want):
        raise BackupError("the manifest does not match its checksum; the backup is corrupt")
    try:
        manifest = msgspec.json.decode(body, type=Manifest)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BackupError(f"the manifest is unreadable ({exc})") from None
    if manifest.format != FORMAT or manifest.version != VERSION:
        raise BackupError(f"unsupported backup format {manifest.format!r} version {manifest.version}")
    listed = {e.path: e for e in manifest.entries}
    content = [n for n in order if n not in (MANIFEST, MANIFEST_SUM)]
    if set(listed) != set(content) or len(listed) != len(manifest.entries):
        raise BackupError("the entries do not match the manifest; the backup is corrupt or incomplete")
    for name in content:
        size, digest = seen[name]
        entry = listed[name]
        if entry.size != size or not hmac.compare_digest(entry.sha256, digest):
            raise BackupError(f"entry {name!r} does not match its checksum in the manifest; the backup is corrupt")
    if USERS not in smalls:
        raise BackupError("the users document is missing")
    try:
        users = msgspec.json.decode(smalls[USERS], type=UsersDocument)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BackupError(f"the users document is unreadable ({exc})") from None
    _refuse_newer("users", users.version, USERS_VERSION)
    result = Verified(manifest=manifest, users=users)
    position = {name: i for i, name in enumerate(order)}
    for name, data in smalls.items():
        ids = parse_meta_path(name)
        if ids is None:
            continue
        try:
            meta = msgspec.json.decode(data, type=BrainMeta)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise BackupError(f"{name} is unreadable ({exc})") from None
        if (meta.user_id, meta.id) != ids:
            raise BackupError(f"{name} describes another brain")
        for checksum in meta.blobs():
            blob = f"brains/{ids[0]}/{ids[1]}/blobs/{checksum}"
            if blob not in seen:
                raise BackupError(f"{name} names archive {checksum} which is not in the backup")
            if position[blob] < position[name]:
                raise BackupError(f"{blob} comes before its metadata")
            head = heads[blob]
            if head.startswith(b"BSTSEAL\x00"):
                result.sealed_heads[(meta.user_id, meta.id, checksum)] = head
        result.metas[ids] = meta
    for blob in heads:
        user_id, brain_id, checksum = parse_blob_path(blob)  # type: ignore[misc]
        owner = result.metas.get((user_id, brain_id))
        if owner is None or checksum not in owner.blobs():
            raise BackupError(f"{blob} belongs to no brain in the backup")
    _verify_sharing(smalls, result)
    for left in manifest.left_out:
        if (left.user_id, left.brain_id) in result.metas:
            raise BackupError(f"the manifest lists brain {left.user_id}/{left.brain_id} as left out, but the backup "
                              "holds it; the backup is corrupt")
    if len(result.metas) != manifest.brains:
        raise BackupError("the number of brains does not match the manifest")
    progress(
        f"verified: {len(users.users)} user(s), {len(result.metas)} brain(s), {len(heads)} archive(s), "
        f"{sum(m.stored_bytes() for m in result.metas.values())} stored bytes"
    )
    return result


def _refuse_newer(what: str, version: int, newest: int) -> None:
    """A document a newer release wrote would be restored without the fields this one does not
    know (as ``WatchedDocument`` refuses it in a store): refused before anything is changed."""
    if version > newest:
        raise BackupError(f"the backup's {what} document has version {version}, newer than this brain-store "
                          f"knows (up to {newest}): restore it with the release that made it")


def _verify_sharing(smalls: dict[str, bytes], result: Verified) -> None:
    """Decode the sharing document and audit logs (when present) so a bad one is refused up front
    (after the brains' metadata: an audit log must belong to a backed-up brain)."""
    from store.sharing.registry import SHARING_VERSION, SharingDocument

    if SHARING in smalls:
        try:
            result.sharing = msgspec.json.decode(smalls[SHARING], type=SharingDocument)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise BackupError(f"the sharing document is unreadable ({exc})") from None
        _refuse_newer("sharing", result.sharing.version, SHARING_VERSION)
    for name, data in smalls.items():
        if (brain_id := parse_audit_path(name)) is None:
            continue
        try:
            events = [msgspec.json.decode(line, type=dict[str, Any]) for line in data.splitlines() if line]
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise BackupError(f"{name} is unreadable ({exc})") from None
        if brain_id not in {brain for _user, brain in result.metas}:
            raise BackupError(f"{name} belongs to no brain in the backup")
        result.audits[brain_id] = events


def check_keys(verified: Verified, master_keys: tuple[bytes, ...]) -> None:
    """Refuse sealed archives that none of the configured master keys can open."""
    if not verified.sealed_heads:
        return
    if not master_keys:
        raise BackupError(
            f"the backup holds {len(verified.sealed_heads)} sealed archive(s) but this store has no "
            "STORE_ENCRYPTION_KEY; set the master key of the backed-up store"
        )
    from store.storage import sealing

    for (user_id, _brain, checksum), head in verified.sealed_heads.items():
        ids = {sealing.key_id(sealing.derive_user_key(k, user_id)) for k in master_keys}
        if sealing.read_key_id(head) not in ids:
            raise BackupError(
                f"archive {checksum} was sealed with a master key this store does not have; set "
                "STORE_ENCRYPTION_KEY (or STORE_ENCRYPTION_PREVIOUS_KEYS) to the backed-up store's key"
            )


def store_is_empty(backend: Any, registry: Any) -> bool:
    """True when the target has no users, no deny records and no brains, damaged ones included:
    a brain whose metadata is damaged is still content a restore without --force must not replace."""
    if registry.users() or registry.denied():
        return False
    return not any(any(backend.survey_brains(u)) for u in backend.iter_users())


@dataclass
class RestoreReport:
    """What a restore did."""

    users: int = 0
    brains: int = 0
    archives: int = 0
    bytes: int = 0  # stored bytes of the restored brains (BrainMeta.stored_bytes), as `user list` shows
    removed_brains: int = 0
    kept_brains: int = 0  # left out of the backup (damaged when it was made): the target's own kept
    not_restored: int = 0  # left out of the backup and not in the target: the restored store lacks them


def restore_backup(
    path: Path,
    open_target: Callable[[], tuple[Any, Any]],
    *,
    force: bool = False,
    master_keys: tuple[bytes, ...] = (),
    progress: Callable[[str], None] = lambda line: None,
) -> RestoreReport:
    """Verify ``path``, then make the target store equal to it (refusing a non-empty target unless ``force``).

    ``open_target`` returns (backend, users registry[, sharing]); it is only called once the
    backup has been verified, so a refused backup does not even create the target's directories.
    The sharing document ends up equal to the backup's (empty for a backup without one).
    """
    verified = verify_backup(path, progress)
    check_keys(verified, master_keys)
    backend, registry, *rest = open_target()
    sharing = rest[0] if rest else None
    if (verified.sharing is not None or verified.audits) and (sharing is None or sharing.registry is None):
        raise BackupError("the backup holds sharing data but the target store cannot keep it")
    was_empty = store_is_empty(backend, registry)
    if not was_empty and not force:
        raise BackupError("the target store is not empty; use --force to replace its contents with the backup")
    made: dict[tuple[str, str], bool] = {}  # brains begun -> finished, so an interrupted restore can take them back
    shared_before = sharing.registry.document() if was_empty and sharing is not None and sharing.registry else None
    try:
        return _write(path, verified, backend, registry, sharing, master_keys, progress, made)
    except BaseException as exc:  # Ctrl-C or SIGTERM (cli/store/runner.sigterm_as_ctrl_c), a failing disk
        # A second Ctrl-C or SIGTERM must not cut the undo short: that left the store half-restored.
        with _interrupts_deferred() as noted:
            _undo(backend, registry, sharing, made, progress, was_empty=was_empty, shared_before=shared_before)
        if noted and not isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt from exc  # stopped meanwhile: it ends as stopped
        raise


_DEFERRED_NOTE = b"restore: stopping; taking back what it wrote first (it ends when that is done)\n"


@contextmanager
def _interrupts_deferred() -> Iterator[list[int]]:
    """Within the block SIGINT and SIGTERM are noted (yielded, in order), not acted on, and each
    says so on stderr; the handlers before it are back on leaving. Off the main thread, where
    handlers cannot be set, nothing is deferred (no signal is delivered there anyway)."""
    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(signum: int, _frame: object) -> None:
        noted.append(signum)
        os.write(2, _DEFERRED_NOTE)  # not print(): the handler may run inside a write to the same stream

    previous = {signum: signal.signal(signum, note) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield noted
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _undo(backend: Any, registry: Any, sharing: Any, made: dict[tuple[str, str], bool], progress: Callable[[str], None],
          *, was_empty: bool, shared_before: Any) -> None:
    """After a restore stopped half-way: an empty store is made empty again (its brains, users and
    shares taken back); a forced one loses the brain it was building (a half-built brain holds
    placeholder snapshots) and is left partly restored, which a second run makes whole."""
    from store.auth.users import UsersDocument

    for (user_id, brain_id), finished in made.items():
        if finished and not was_empty:
            continue
        backend.delete_brain(user_id, brain_id)
        if sharing is not None and sharing.audit is not None:
            sharing.audit.forget(brain_id)
    if was_empty:
        registry.replace(UsersDocument())
        if shared_before is not None:  # the sharing document it had (an empty store may hold stale shares)
            sharing.registry.replace(shared_before)
        progress("restore stopped: nothing restored, the store is empty as before")
    else:
        progress("restore stopped: the store is partly restored; run the restore again to complete it")


def _write(path: Path, verified: Verified, backend: Any, registry: Any, sharing: Any,
           master_keys: tuple[bytes, ...], progress: Callable[[str], None],
           made: dict[tuple[str, str], bool]) -> RestoreReport:
    """Second pass: make the target equal to the verified backup; ``made`` says which brains it
    began and whether each is finished."""
    report = RestoreReport()
    expected = {e.path: e for e in verified.manifest.entries}
    wanted = set(verified.metas)
    # brains the backup could not hold (damaged metadata when it was made): not "gone at the source",
    # so the target's brain of that id, whatever its state, is kept as it is, never removed
    left_out = {(left.user_id, left.brain_id): left for left in verified.manifest.left_out}
    kept: set[tuple[str, str]] = set()
    # --force: the target ends up equal to the backup, so brains it does not hold go; what it
    # loses is said brain by brain (the operator asked for it, but should see what it was)
    for user_id in list(backend.iter_users()):
        metas, damaged = backend.survey_brains(user_id)
        for meta in metas:
            if (user_id, meta.id) in left_out:
                kept.add((user_id, meta.id))
                progress(f"brain {user_id}/{meta.id} ({meta.name}): left out of the backup, its metadata was "
                         "damaged when it was made; kept as it is here")
            elif (user_id, meta.id) not in wanted:
                progress(f"brain {user_id}/{meta.id} ({meta.name}): not in the backup; removed")
                backend.delete_brain(user_id, meta.id)
                report.removed_brains += 1
            elif (newer := _newer_here(meta, verified.metas[(user_id, meta.id)])) is not None:
                progress(newer)
        for broken in damaged:
            if (user_id, broken.brain_id) in left_out:
                kept.add((user_id, broken.brain_id))
                progress(f"brain {broken.describe()}: left out of the backup, its metadata was damaged when it "
                         "was made; kept as it is here, still damaged")
    for ids, left in left_out.items():
        if ids not in kept:
            progress(f"brain {left.user_id}/{left.brain_id}: left out of the backup ({left.reason or 'damaged'}) "
                     "and not in this store; NOT restored")
    report.kept_brains, report.not_restored = len(kept), len(left_out) - len(kept)
    if sharing is not None and sharing.registry is not None and verified.sharing is None:
        from store.sharing.registry import SharingDocument

        sharing.registry.replace(SharingDocument())  # an older backup: nothing was shared
    builder: BrainBuilder | None = None
    for info, f in _members(path):
        entry = expected.get(info.name)
        if info.name == USERS:
            data = f.read()
            _check_again(info.name, data, entry)
            registry.replace(verified.users)
            report.users = len(verified.users.users)
            progress(f"users: {report.users} restored")
        elif info.name == SHARING:
            _check_again(info.name, f.read(), entry)
            sharing.registry.replace(verified.sharing)
            progress(f"sharing: {len(verified.sharing.shares)} shared brain(s), "
                     f"{len(verified.sharing.keys)} agent key(s) restored")
        elif (brain_id := parse_audit_path(info.name)) is not None:
            _check_again(info.name, f.read(), entry)
            sharing.audit.replace(brain_id, verified.audits[brain_id])
        elif (ids := parse_meta_path(info.name)) is not None:
            data = f.read()
            _check_again(info.name, data, entry)
            if builder is not None:
                _finish(builder, report, progress, made)
            meta = verified.metas[ids]
            made[ids] = False
            builder = BrainBuilder(backend, all_sealed(meta) if master_keys else meta, replace=True)
        elif (parts := parse_blob_path(info.name)) is not None:
            if builder is None or (builder.meta.user_id, builder.meta.id) != parts[:2]:
                raise BackupError(f"{info.name} is not preceded by its metadata")
            # A store with a key serves sealed archives only: plain ones (a backup made before
            # encryption was turned on) are sealed on the way in, as an upload would be.
            seal_with = master_keys[0] if master_keys and parts not in verified.sealed_heads else None

            def write(out: BinaryIO, f: BinaryIO = f, name: str = info.name, parts: tuple[str, str, str] = parts,
                      seal_with: bytes | None = seal_with) -> None:
                sealer = _sealer(out, seal_with, parts[0], parts[1]) if seal_with is not None else None
                size, digest, _ = _hash_stream(f, out.write if sealer is None else sealer.write)
                if entry is None or size != entry.size or not hmac.compare_digest(digest, entry.sha256):
                    raise BackupError(f"{name} changed since it was verified")
                if sealer is not None:
                    sealer.close(parts[2])

            builder.add(parts[2], write)
            report.archives += 1
    if builder is not None:
        _finish(builder, report, progress, made)
    progress(
        f"restore done: {report.users} user(s), {report.brains} brain(s), {report.archives} archive(s), "
        f"{report.bytes} stored bytes" + (f"; {report.removed_brains} other brain(s) removed" if report.removed_brains else "")
        + (f"; {report.kept_brains} brain(s) left out of the backup kept as they were" if report.kept_brains else "")
        + (f"; {report.not_restored} brain(s) left out of the backup NOT restored" if report.not_restored else "")
    )
    return report


def _newer_here(here: BrainMeta, backed_up: BrainMeta) -> str | None:
    """The line saying that the target's version of a brain is newer than the backup's (which
    replaces it), else None."""
    if here.current is None or (backed_up.current is not None and (
            here.current.checksum == backed_up.current.checksum
            or here.current.synced_at <= backed_up.current.synced_at)):
        return None
    then = backed_up.current.synced_at if backed_up.current is not None else "none"
    return (f"brain {here.user_id}/{here.id} ({here.name}): the store's version of {here.current.synced_at} is "
            f"newer than the backup's ({then}); replaced by it")


def _sealer(out: BinaryIO, master_key: bytes, user_id: str, brain_id: str) -> Any:
    """A ``SealWriter`` sealing a plain archive into ``out`` as the store seals an upload."""
    from store.storage import sealing

    return sealing.SealWriter(out, sealing.derive_user_key(master_key, user_id), user_id, brain_id)


def _finish(builder: BrainBuilder, report: RestoreReport, progress: Callable[[str], None],
            made: dict[tuple[str, str], bool]) -> None:
    builder.finish()
    made[(builder.meta.user_id, builder.meta.id)] = True
    report.brains += 1
    meta = builder.meta
    report.bytes += meta.stored_bytes()
    progress(f"brain {report.brains}: {meta.user_id}/{meta.id} ({meta.name}); {report.archives} archive(s), "
             f"{report.bytes} stored bytes so far")


def _check_again(name: str, data: bytes, entry: Any) -> None:
    if entry is None or entry.size != len(data) or not hmac.compare_digest(entry.sha256, hashlib.sha256(data).hexdigest()):
        raise BackupError(f"{name} changed since it was verified")
