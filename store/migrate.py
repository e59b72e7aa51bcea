"""Move a whole store between a data directory and an S3 bucket (either direction).

Users (the document with token hashes and OIDC deny records), every brain with its
current archive and snapshots, and what is shared (members and roles, agent key hashes,
each copied brain's sharing audit log) are copied. Blobs are copied byte for byte as stored:
a sealed archive is bound to user, brain and checksum, not to where it lives, so it
stays valid without the key. With a master key set (the target's), plain archives are
sealed on the way: a store with a key serves sealed archives only. A brain is written
blobs first and metadata last, so an interrupted migration leaves no half-visible brain;
running it again skips brains that already exist at the target, brings each user's
record there up to date (a token rotated at the source since works, the old one no longer), and
removes there the users an earlier run brought from the same source that the source no longer
has (their tokens and agent keys stop working; their brains are kept, as ``user remove`` keeps
them), as it does the agent keys, memberships and OIDC deny records an earlier run brought that
the source no longer has. What the target removed since an earlier run is not brought again (a
removal there holds), and what a run changes in members and keys of brains already at the target
goes in their sharing audit log. What came from which source is kept at the target
(``migrated-users.json``), so the target's own users, members and keys stay.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from common.docstore import DocumentStore
from common.files import NotARegularFile
from store.auth.users import User, UserRegistry, UsersDocument
from store.backup.apply import all_sealed
from store.settings import StoreSettings
from store.sharing.registry import Merged, Share, SharingDocument, SharingError
from store.storage import sealing
from store.storage.base import BrainMeta, CorruptMeta
from store.storage.local import LocalBackend, fsync_dir, write_atomic
from store.storage.s3 import Account, BrainRecord, Claim, S3Backend


class MigrateError(Exception):
    """A location cannot be used (bad URL, target conflicts)."""


@dataclass
class MigrateReport:
    """What a migration did."""

    users: int = 0
    users_updated: int = 0  # already at the target, changed at the source since (a rotated token)
    users_removed: int = 0  # brought by an earlier run, removed at the source since
    denials_lifted: int = 0  # OIDC deny records brought by an earlier run, lifted at the source since
    shares: int = 0
    keys: int = 0
    members: int = 0  # added to brains shared at the target already
    keys_removed: list[str] = dataclasses.field(default_factory=list)  # "bsk_prefix of name": revoked at the source
    members_removed: list[str] = dataclasses.field(default_factory=list)  # "name on brain id": removed at the source
    brains: int = 0
    skipped: int = 0
    blobs: int = 0
    bytes: int = 0
    sealed: int = 0  # plain archives sealed on the way (STORE_ENCRYPTION_KEY set)
    differing: list[str] = dataclasses.field(default_factory=list)  # skipped brains unlike the source's ("user/brain")
    withheld: list[str] = dataclasses.field(default_factory=list)  # removed at the target since: not brought again
    # brains not copied because their metadata is damaged (at the source, or a copy at the target):
    # "user/brain (metadata WHERE: REASON)"; the command fails at the end so nobody takes the pass for whole
    damaged: list[str] = dataclasses.field(default_factory=list)


def location_settings(settings: StoreSettings, location: str, spool: Path) -> StoreSettings:
    """Settings pointing at ``location``: ``s3://bucket/prefix`` or a directory path.

    ``spool`` is where an S3 backend may stage files: a private directory of this run
    (a fixed shared path under /tmp could be read or planted by other local users)."""
    if location.startswith("s3://"):
        bucket, _, prefix = location[5:].partition("/")
        if not bucket:
            raise MigrateError(f"{location}: expected s3://bucket[/prefix]")
        return dataclasses.replace(settings, backend="s3", s3_bucket=bucket, s3_prefix=prefix, data_dir=spool)
    if "://" in location:
        raise MigrateError(f"{location}: only directories and s3:// URLs are supported")
    return dataclasses.replace(settings, backend="local", data_dir=Path(location).expanduser())


MIGRATED = "migrated-users.json"  # in the target's document store, beside users.json
MIGRATED_FORMAT = 1  # fields added since have defaults: records of earlier versions read the same


class Noted(msgspec.Struct):
    """What one pass from a source noted before adding it (``MigratedUsers.pending``)."""

    users: list[str] = msgspec.field(default_factory=list)
    denied: list[tuple[str, str]] = msgspec.field(default_factory=list)
    members: list[tuple[str, str]] = msgspec.field(default_factory=list)
    keys: list[str] = msgspec.field(default_factory=list)


class MigratedUsers(msgspec.Struct):
    """The target's record of what migrations brought from each source (by ``source_key``): users,
    OIDC deny records, memberships of shared brains and agent keys (by hash), so a later pass takes
    away what the source no longer has, leaves the target's own, and does not bring again what the
    target removed since. The four maps hold what the last finished pass brought; ``pending`` what a
    pass under way (or stopped) noted before adding it: it may not be at the target yet, so its
    absence there is no removal. Records of earlier versions (no ``pending``) read the same."""

    version: int = MIGRATED_FORMAT
    sources: dict[str, list[str]] = msgspec.field(default_factory=dict)  # user ids
    denied: dict[str, list[tuple[str, str]]] = msgspec.field(default_factory=dict)  # (issuer, subject)
    members: dict[str, list[tuple[str, str]]] = msgspec.field(default_factory=dict)  # (brain id, user id)
    keys: dict[str, list[str]] = msgspec.field(default_factory=dict)  # agent key sha256
    pending: dict[str, Noted] = msgspec.field(default_factory=dict)


@dataclass(frozen=True)
class Brought:
    """What one source has (or what earlier passes brought from it), as ``MigratedUsers`` notes it."""

    users: frozenset[str] = frozenset()
    denied: frozenset[tuple[str, str]] = frozenset()
    members: frozenset[tuple[str, str]] = frozenset()
    keys: frozenset[str] = frozenset()

    @staticmethod
    def noted(record: MigratedUsers, source: str) -> Brought:
        """What ``record`` says earlier passes brought from ``source``."""
        return Brought(frozenset(record.sources.get(source, ())),
                       frozenset(tuple(d) for d in record.denied.get(source, ())),  # type: ignore[misc]
                       frozenset(tuple(m) for m in record.members.get(source, ())),  # type: ignore[misc]
                       frozenset(record.keys.get(source, ())))

    @staticmethod
    def pending(record: MigratedUsers, source: str) -> Brought:
        """What a pass from ``source`` noted and did not finish (stopped), or nothing."""
        noted = record.pending.get(source, Noted())
        return Brought(frozenset(noted.users), frozenset(tuple(d) for d in noted.denied),  # type: ignore[misc]
                       frozenset(tuple(m) for m in noted.members), frozenset(noted.keys))  # type: ignore[misc]

    @staticmethod
    def at(users: UsersDocument, sharing: SharingDocument) -> Brought:
        """Everything a source has now."""
        return Brought(frozenset(u.id for u in users.users), frozenset((d.issuer, d.subject) for d in users.denied),
                       frozenset((s.brain_id, u) for s in sharing.shares for u in s.members),
                       frozenset(k.sha256 for k in sharing.keys))

    def __or__(self, other: Brought) -> Brought:
        return Brought(self.users | other.users, self.denied | other.denied, self.members | other.members,
                       self.keys | other.keys)

    def __sub__(self, other: Brought) -> Brought:
        return Brought(self.users - other.users, self.denied - other.denied, self.members - other.members,
                       self.keys - other.keys)

    def __and__(self, other: Brought) -> Brought:
        return Brought(self.users & other.users, self.denied & other.denied, self.members & other.members,
                       self.keys & other.keys)

    def __bool__(self) -> bool:
        return bool(self.users or self.denied or self.members or self.keys)

    def as_noted(self) -> Noted:
        return Noted(sorted(self.users), sorted(self.denied), sorted(self.members), sorted(self.keys))


def source_key(location: str) -> str:
    """How ``location`` (``--from``) is named in ``MigratedUsers``: a directory by its absolute
    path, a bucket as ``s3://bucket/prefix`` without stray slashes, so each run names it alike."""
    if location.startswith("s3://"):
        bucket, _, prefix = location[5:].partition("/")
        return f"s3://{bucket}/{prefix.strip('/')}"
    return str(Path(location).expanduser().resolve())


def _migrated(docs: DocumentStore) -> MigratedUsers:
    found = docs.get(MIGRATED)
    if found is None:
        return MigratedUsers()
    try:
        record = msgspec.json.decode(found.data, type=MigratedUsers)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        # read as nothing, users removed at the source would quietly stay at the target
        raise MigrateError(f"{docs.locate(MIGRATED)} is unreadable ({exc}); remove it to go on (users removed "
                           "at the source since an earlier run then stay at the target)") from None
    if record.version > MIGRATED_FORMAT:
        # what it holds beyond this version's fields would be dropped by the rewrite, unread
        raise MigrateError(f"{docs.locate(MIGRATED)} was written by a newer brain-store (format "
                           f"{record.version}); migrate with that version")
    return record


def _note_pending(docs: DocumentStore, source: str, noted: Brought) -> None:
    """Note ``noted`` as what a pass from ``source`` (a ``source_key``) is about to bring: a pass
    stopped after adding it still knows it came from there."""

    def change(data: bytes | None) -> bytes:
        record = msgspec.json.decode(data, type=MigratedUsers) if data is not None else MigratedUsers()
        record.pending[source] = noted.as_noted()
        return msgspec.json.encode(record)

    docs.update(MIGRATED, change)


def _record_migrated(docs: DocumentStore, source: str, brought: Brought) -> None:
    """Note ``brought`` as what the finished pass from ``source`` brought."""

    def change(data: bytes | None) -> bytes:
        record = msgspec.json.decode(data, type=MigratedUsers) if data is not None else MigratedUsers()
        record.sources[source] = sorted(brought.users)
        record.denied[source] = sorted(brought.denied)
        record.members[source] = sorted(brought.members)
        record.keys[source] = sorted(brought.keys)
        record.pending.pop(source, None)
        return msgspec.json.encode(record)

    docs.update(MIGRATED, change)


def _without(users: UsersDocument, sharing: SharingDocument,
             withheld: Brought) -> tuple[UsersDocument, SharingDocument]:
    """The source's documents less what the target removed since an earlier pass (``withheld``),
    and less the memberships and agent keys of users it removed."""

    def kept_member(brain_id: str, user_id: str) -> bool:
        return (brain_id, user_id) not in withheld.members and user_id not in withheld.users

    shares = [Share(s.brain_id, s.owner_id, {u: r for u, r in s.members.items() if kept_member(s.brain_id, u)})
              for s in sharing.shares]
    return (UsersDocument(users=[u for u in users.users if u.id not in withheld.users],
                          denied=[d for d in users.denied if (d.issuer, d.subject) not in withheld.denied]),
            SharingDocument(shares=[s for s in shares if s.members],
                            keys=[k for k in sharing.keys if k.sha256 not in withheld.keys
                                  and k.user_id not in withheld.users]))


def _copy_users(source: UsersDocument, dst: UserRegistry, gone: Brought) -> tuple[int, int, list[User], int]:
    """Make the target's record of every source user equal to the source's, and remove the users
    and deny records of ``gone`` (brought by an earlier run, no longer at the source); returns
    (added, updated, removed users, deny records lifted). A user the target has already (an earlier
    run) takes the source's record: a token rotated, or a name or address changed, at the source
    since must not leave the old one working there. The target's other users and its own deny
    records stay (only what the source removed goes)."""

    def merge(doc: UsersDocument) -> tuple[int, int, list[User], int]:
        removed = [u for u in doc.users if u.id in gone.users]
        doc.users[:] = [u for u in doc.users if u.id not in gone.users]  # first: a name may be taken again since
        at = {u.id: i for i, u in enumerate(doc.users)}
        added = updated = 0
        for user in source.users:
            if any(u.name == user.name and u.id != user.id for u in doc.users):
                raise MigrateError(f"the target already has a different user named {user.name!r}")
            if user.id not in at:
                at[user.id] = len(doc.users)
                doc.users.append(user)
                added += 1
            elif doc.users[at[user.id]] != user:
                doc.users[at[user.id]] = user
                updated += 1
        denied = len(doc.denied)
        doc.denied[:] = [d for d in doc.denied if (d.issuer, d.subject) not in gone.denied]  # `user allow` there
        lifted = denied - len(doc.denied)
        known = {(d.issuer, d.subject) for d in doc.denied}
        doc.denied.extend(d for d in source.denied if (d.issuer, d.subject) not in known)
        return added, updated, removed, lifted

    return dst.edit(merge)


def _withheld_names(withheld: Brought, users: UsersDocument, sharing: SharingDocument) -> list[str]:
    """``withheld`` for the operator, one phrase per kind (user names: an id alone names nobody)."""
    names = {u.id: u.name for u in users.users}
    # the memberships and keys of a removed user went with them (`user remove`): the user says it
    members = sorted((b, u) for b, u in withheld.members if u not in withheld.users)
    keys = [k for k in sharing.keys if k.sha256 in withheld.keys and k.user_id not in withheld.users]
    parts = []
    if withheld.users:
        parts.append(f"{len(withheld.users)} user(s) ("
                     + ", ".join(f"{names.get(u, u)} ({u})" for u in sorted(withheld.users)) + ")")
    if members:
        parts.append(f"{len(members)} membership(s) ("
                     + ", ".join(f"{names.get(u, u)} on brain {b}" for b, u in members) + ")")
    if keys:
        parts.append(f"{len(keys)} agent key(s) ("
                     + ", ".join(f"{k.prefix} of {names.get(k.user_id, k.user_id)}" for k in keys) + ")")
    if withheld.denied:
        parts.append(f"{len(withheld.denied)} OIDC deny record(s)")
    return parts


def _audit_merge(audit: Any, merged: Merged, names: dict[str, str], copied: set[str]) -> None:
    """Note in the sharing audit log of each brain at the target what the merge changed there, as
    `brain-store share|unshare|key` note an operator's change (actor ``operator``). A brain copied by
    this pass is left out: its log is the source's, which tells how its members and keys came."""

    def note(brain_id: str, action: str, **details: Any) -> None:
        if brain_id not in copied:
            audit.record(brain_id, "operator", "operator (migrate)", action, **details)

    for brain_id, user_id, role in merged.set_members:
        note(brain_id, "member_set", member=user_id, member_name=names.get(user_id, ""), role=role)
    for brain_id, user_id in merged.removed_members:
        note(brain_id, "member_removed", member=user_id, member_name=names.get(user_id, ""))
    for key in merged.added_keys:
        for brain_id in key.brains:
            note(brain_id, "key_created", key=key.prefix, member=key.user_id, scope=key.scope, label=key.label)
    for key in merged.removed_keys:
        for brain_id in key.brains:
            note(brain_id, "key_revoked", key=key.prefix, member=key.user_id)


def _same_brain(source: BrainMeta, here: BrainMeta) -> bool:
    """Whether the target's copy of a brain is still the source's: a migration writes the source's
    metadata as it is (only marking archives sealed), so any commit since shows."""

    def state(meta: BrainMeta) -> tuple[object, ...]:
        current = meta.current.checksum if meta.current is not None else None
        return meta.generation, meta.name, meta.deleted_at, current, sorted(meta.blobs())

    return state(source) == state(here)


def _copy_blob(src: Any, meta: BrainMeta, checksum: str, path: Path, seal_with: bytes | None) -> bool:
    """Copy one stored archive of ``meta`` to ``path`` as stored; with ``seal_with`` (the master
    key of the target) a plain one is then sealed, as an upload into a store with a key is.
    The source is read once (on S3 each read is a request). True when it was sealed here."""
    try:
        with src.open_blob(meta.user_id, meta.id, checksum) as blob, open(path, "wb") as out:
            shutil.copyfileobj(blob, out, 1024 * 1024)
    except NotARegularFile as exc:  # a named pipe in blobs/ would have hung here
        raise MigrateError(f"brain {meta.user_id}/{meta.id}: archive {checksum}: {exc} (damaged at the source); the "
                           "brains before it are copied, running it again skips them") from None
    if seal_with is None:
        return False
    sealed_path = path.with_name(path.name + ".sealed")
    with open(path, "rb") as stored:
        if sealing.is_sealed(stored.read(len(sealing.MAGIC))):
            return False
        stored.seek(0)
        with open(sealed_path, "wb") as out:
            try:
                sealing.reseal(stored, out, old_key=None, new_key=sealing.derive_user_key(seal_with, meta.user_id),
                               user_id=meta.user_id, brain_id=meta.id, checksum=checksum)
            except sealing.SealError as exc:
                raise MigrateError(f"brain {meta.user_id}/{meta.id}: archive {checksum}: {exc}; the brains before "
                                   "it are copied, running it again skips them") from None
    os.replace(sealed_path, path)
    return True


def _import_s3(dst: S3Backend, meta: BrainMeta, blobs: dict[str, Path]) -> bool:
    if dst.read_meta(meta.user_id, meta.id) is not None:
        return False
    from store.storage.s3client import upload_file

    keys: dict[str, str] = {}
    for checksum, path in blobs.items():
        key = dst.new_blob_key(meta.user_id, meta.id, checksum)
        with open(path, "rb") as f:
            upload_file(dst.client, dst.bucket.name, key, f, path.stat().st_size)
        keys[checksum] = key
    if not dst.put_record(meta.user_id, meta.id, BrainRecord(meta=meta, blob_keys=keys), None):
        return False

    def claim(account: Account) -> tuple[None, Account]:
        brains = dict(account.brains)
        brains[meta.id] = Claim(bytes=meta.stored_bytes(), since=0.0)
        return None, Account(brains=brains)

    dst._edit_account(meta.user_id, claim)
    return True


def _import_local(dst: LocalBackend, meta: BrainMeta, blobs: dict[str, Path]) -> bool:
    brain_dir = dst.brain_dir(meta.user_id, meta.id)
    if (brain_dir / "meta.json").exists():
        return False
    blobs_dir = brain_dir / "blobs"
    for directory in (brain_dir.parent, brain_dir, blobs_dir):  # each level 0700, as the store makes them
        directory.mkdir(exist_ok=True, mode=0o700)
    for checksum, path in blobs.items():
        staged = dst.stage(meta.user_id, meta.id)
        try:
            with open(path, "rb") as f:
                shutil.copyfileobj(f, staged.file, 1024 * 1024)
            staged.finish()
            (staged.path).rename(blobs_dir / checksum)
            staged.committed = True
        finally:
            staged.discard()
    if dst.fsync:
        fsync_dir(blobs_dir)
    write_atomic(brain_dir / "meta.json", msgspec.json.encode(meta), fsync=dst.fsync)
    if dst.fsync:
        fsync_dir(brain_dir.parent)
    return True


def migrate(
    settings: StoreSettings, source: str, target: str, progress: Callable[[str], None] = lambda line: None
) -> MigrateReport:
    """Copy users, brains with their snapshots, shares and agent keys from ``source`` to ``target``
    (directories or s3:// URLs)."""
    from store.context import document_store, no_store_there, open_registry, open_sharing
    from store.storage.factory import open_backend

    # mkdtemp: 0700, unique, removed with everything staged in it when the run ends.
    with tempfile.TemporaryDirectory(prefix="brain-store-migrate-") as scratch_dir:
        scratch = Path(scratch_dir)
        src_settings = location_settings(settings, source, scratch / "source-spool")
        dst_settings = location_settings(settings, target, scratch / "target-spool")
        if source_key(source) == source_key(target):
            # it "copied" nothing and noted the store as migrated from itself
            raise MigrateError(f"--from and --to are the same store ({source_key(source)}); nothing migrated")
        if (problem := no_store_there(src_settings)) is not None:
            raise MigrateError(problem)  # a mistyped path or prefix would "migrate" nothing, successfully
        src: Any = open_backend(src_settings)
        src_users = open_registry(src_settings)
        if (problem := src_users.unreadable()) is not None:
            # read as nothing, the target would get no users at all
            raise MigrateError(f"{problem}; restore it (or its last good copy) before migrating")
        src_sharing = open_sharing(src_settings, src_users, src)
        if (problem := src_sharing.registry.unreadable()) is not None:
            # read as nothing, every share and agent key would be left behind
            raise MigrateError(f"{problem}; restore it (or its last good copy) before migrating")
        dst: Any = open_backend(dst_settings)
        dst_users = open_registry(dst_settings)
        dst_sharing = open_sharing(dst_settings, dst_users, dst)
        report = MigrateReport()
        source_users = UsersDocument(users=src_users.users(), denied=src_users.denied())
        source_sharing = src_sharing.registry.document()
        present = Brought.at(source_users, source_sharing)
        dst_docs, from_here = document_store(dst_settings), source_key(source)
        record = _migrated(dst_docs)
        finished, unfinished = Brought.noted(record, from_here), Brought.pending(record, from_here)
        earlier = finished | unfinished
        gone = earlier - present
        if (problem := dst_users.damaged() or dst_sharing.registry.damaged()) is not None:
            # what the target has is read to know what its operator removed; its last good copy is not that
            raise MigrateError(f"at the target: {problem}; fix or restore it first; nothing migrated")
        here = Brought.at(UsersDocument(users=dst_users.users(), denied=dst_users.denied()),
                          dst_sharing.registry.document())
        # What a finished pass brought, the source still has and the target has not: its operator
        # removed it since (`user remove`, `unshare`, `key revoke`, `user allow`). Not brought again:
        # a removal there must hold. (What a stopped pass only noted may never have been added.)
        withheld = (finished & present) - here
        report.withheld = _withheld_names(withheld, source_users, source_sharing)
        # Noted before they are added: a run stopped after adding them still knows they came from here.
        _note_pending(dst_docs, from_here, present | unfinished)
        source_users, source_sharing = _without(source_users, source_sharing, withheld)
        report.users, report.users_updated, removed, report.denials_lifted = _copy_users(source_users, dst_users, gone)
        report.users_removed = len(removed)
        progress(f"users: {report.users} added, {report.users_updated} updated"
                 + (f", {len(removed)} removed (removed at the source since an earlier run: "
                    + ", ".join(f"{u.name} ({u.id})" for u in removed)
                    + "); their brains are kept here: `brain-store user orphans` lists them" if removed else "")
                 + (f", {report.denials_lifted} OIDC deny record(s) lifted (allowed again at the source since an "
                    "earlier run)" if report.denials_lifted else ""))
        if withheld:
            progress(f"not brought again (removed at the target since an earlier pass; the source still has "
                     f"them): {'; '.join(report.withheld)}")
        copied: set[str] = set()  # brains copied by this pass: their audit log is the source's
        for user_id in list(src.iter_users()):
            if user_id in withheld.users:
                progress(f"brains of user {user_id}: not copied (the user was removed at the target since an "
                         "earlier pass)")
                continue
            metas, damaged = src.survey_brains(user_id)
            for broken in damaged:
                # not copied: unreadable metadata cannot be carried over safely (an S3 record and a
                # meta.json differ, and which archives it names is unknown); the run fails at the end
                report.damaged.append(broken.describe())
                progress(f"brain {broken.describe()}: NOT copied, its metadata is damaged; repair it (or restore "
                         "the brain from a backup) and migrate again")
            for meta in metas:
                try:
                    here = dst.read_meta(user_id, meta.id)  # before copying its archives
                except CorruptMeta as exc:
                    report.skipped += 1
                    report.damaged.append(f"{user_id}/{meta.id} (at the target: metadata {exc.where}: {exc.reason})")
                    progress(f"brain {user_id}/{meta.id} ({meta.name}) is at the target with damaged metadata "
                             f"({exc.where}: {exc.reason}); left as it is, NOT copied")
                    continue
                if here is not None:
                    report.skipped += 1
                    if _same_brain(meta, here):
                        progress(f"brain {user_id}/{meta.id} already at the target; skipped")
                    else:
                        report.differing.append(f"{user_id}/{meta.id}")
                        progress(f"brain {user_id}/{meta.id} ({meta.name}) already at the target but not as at the "
                                 "source (changed on either side since it was copied); left as it is")
                    continue
                files: dict[str, Path] = {}
                sealed_here = 0
                for checksum in sorted(meta.blobs()):
                    path = scratch / checksum
                    sealed_here += _copy_blob(src, meta, checksum, path, settings.encryption_key)
                    files[checksum] = path
                if settings.encryption_key is not None:
                    meta = all_sealed(meta)  # a store with a key serves sealed archives only
                done = _import_s3(dst, meta, files) if isinstance(dst, S3Backend) else _import_local(dst, meta, files)
                for path in files.values():
                    path.unlink(missing_ok=True)
                if done:
                    dst_sharing.audit.replace(meta.id, src_sharing.audit.events(meta.id, limit=1 << 30))
                    copied.add(meta.id)
                    report.brains += 1
                    report.blobs += len(files)
                    report.bytes += meta.stored_bytes()  # the same "stored bytes" as user list and backup
                    report.sealed += sealed_here
                    progress(f"brain {user_id}/{meta.id} ({meta.name}): {len(files)} archive(s)"
                             + (f", {sealed_here} sealed on the way" if sealed_here else ""))
                else:
                    report.skipped += 1
                    progress(f"brain {user_id}/{meta.id} already at the target; skipped")
        # Last: a share or key names brains, which are all in place now.
        try:
            merged = dst_sharing.registry.merge(source_sharing, brought_members=earlier.members,
                                                brought_keys=earlier.keys)
        except SharingError as exc:
            raise MigrateError(f"the target's sharing document cannot be changed: {exc}") from None
        report.shares, report.keys, report.members = merged.shares, merged.keys, merged.members
        names = {u.id: u.name for u in [*removed, *dst_users.users()]}  # an id alone names nobody to the operator
        report.keys_removed = [f"{key.prefix} of {names.get(key.user_id, key.user_id)}" for key in merged.removed_keys]
        report.members_removed = [f"{names.get(user_id, user_id)} on brain {brain_id}"
                                  for brain_id, user_id in merged.removed_members]
        _audit_merge(dst_sharing.audit, merged, names, copied)
        for user_id in gone.users:  # their agent keys and memberships go too, as `user remove` does
            if dst_sharing.registry.keys(user_id) or dst_sharing.registry.shared_with(user_id):
                dst_sharing.forget_user(user_id, names.get(user_id, ""), "operator (migrate)", unnoted=copied)
        _record_migrated(dst_docs, from_here, present)
        progress(f"sharing: {report.shares} shared brain(s), {report.keys} agent key(s) added"
                 + (f", {report.members} member(s) added to brains shared already" if report.members else "")
                 + (f"; taken away (gone from the source since an earlier run): {len(report.keys_removed)} agent "
                    f"key(s) ({', '.join(report.keys_removed) or 'none'}), {len(report.members_removed)} "
                    f"membership(s) ({', '.join(report.members_removed) or 'none'})"
                    if report.keys_removed or report.members_removed else ""))
    return report
