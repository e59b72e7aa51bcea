"""Brains in an S3 bucket, shared by any number of stateless store replicas.

Keys under the configured prefix::

    meta/<user>/<brain>.json            the commit point: BrainMeta + where each blob lives
    blobs/<user>/<brain>/<sha>.<id>     immutable archives (sealed when encryption is on)
    accounts/<user>.json                per-user brain list and quota claims (CAS-serialised)
    users.json, sharing.json            accounts and token hashes, shares and agent keys, with
    users.json.last-good, ...           their last good copies (store.auth.users, store.sharing.registry
                                        on common.docstore)

Commit protocol: an upload streams into a local anonymous spool file while it is
hashed and validated; at commit it is sent to a fresh blob key (content-addressed by
its checksum plus a unique id, written once, multipart for large archives), then the
metadata object is replaced with ``If-Match: <etag it was read with>`` (created with
``If-None-Match: *``). That conditional PUT is the single commit point: of N racing
commits exactly one succeeds, whichever replica runs them; the others get
``CommitConflict`` and the service re-reads and decides again (412 for If-Match
uploads). A blob key is referenced by one metadata lineage only and never reused,
so removing blobs a commit dropped cannot race with another commit adopting them.

Quota (user-wide transactions): the account object holds, per brain, a *claim*
that is never below the bytes the brain really stores. A user-wide commit first
replaces the account object with ``If-Match`` (claim = max(before, after)), then
the brain's metadata. Two racing commits to different brains of one user therefore
serialise on the account object, so concurrent uploads cannot exceed the quota;
a commit that fails after its claim leaves an over-count (never an under-count)
until that brain's next commit. The brain count for ``max_brains`` is kept the same way.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as S3ConnectionError

from store.storage.base import (
    SAFE_ID,
    BrainMeta,
    CommitConflict,
    CorruptMeta,
    DamagedBrain,
    StorageError,
    StorageUnavailable,
    check_checksum,
    check_id,
    checked_survey,
    stored_total,
)
from store.storage.s3blob import S3StagedBlob, open_reader
from common.s3client import is_conflict, is_not_found, is_not_modified
from store.storage.s3client import Bucket

log = logging.getLogger("store.s3")

# A brain listed in an account object but without metadata is counted for this long
# (its creator may still be writing the metadata); afterwards it is a crash leftover.
PENDING_GRACE_SECONDS = 300
# Blobs and multipart uploads nobody references are removed by the start-up sweep once
# they are this old (younger ones may belong to a commit in flight on another replica).
ORPHAN_AGE_SECONDS = 3600
_ACCOUNT_ATTEMPTS = 20


class BrainRecord(msgspec.Struct):
    """What the metadata object holds: the brain's metadata and its blob keys by checksum."""

    meta: BrainMeta
    blob_keys: dict[str, str] = msgspec.field(default_factory=dict)


class Claim(msgspec.Struct):
    """A brain in an account: bytes it may store at most, and when it was created."""

    bytes: int = 0
    since: float = 0.0


class Account(msgspec.Struct):
    """Per-user serialisation point for brain creation and quota."""

    generation: int = 0
    brains: dict[str, Claim] = msgspec.field(default_factory=dict)


class BucketMissing(StorageUnavailable, ClientError):
    """S3 says the bucket does not exist (deleted under a running store): every request needing
    it is a 503 until it is back. Still a ``ClientError``, so the command line reports it as
    the S3 error it is."""


def _refuse_missing_bucket(parsed: dict[str, Any], model: Any, **_: Any) -> None:
    """botocore ``after-call`` hook: raise ``BucketMissing`` for a NoSuchBucket answer to any
    call (paginators and blob readers included), before the backend could read it as "no such
    object" or the app as an unexpected error."""
    if parsed.get("Error", {}).get("Code") == "NoSuchBucket":
        raise BucketMissing(parsed, model.name)


class S3Unreachable(StorageUnavailable, HTTPClientError):
    """The S3 endpoint does not answer (connection refused, timed out or cut) after botocore's
    retries: a 503 like a missing bucket, not an unexpected error. Still a ``BotoCoreError``, so
    the command line reports it as the S3 error it is."""

    fmt = "the S3 endpoint cannot be reached: {error}"


def _refuse_unreachable(exception: Exception, **_: Any) -> None:
    """botocore ``after-call-error`` hook: an endpoint that cannot be reached becomes
    ``S3Unreachable`` (the app's 503), whichever call met it."""
    if isinstance(exception, (S3ConnectionError, HTTPClientError)) and not isinstance(exception, S3Unreachable):
        raise S3Unreachable(error=exception) from exception


def _log_damaged(damage: CorruptMeta) -> None:
    log.critical("brain metadata %s is damaged (%s); the brain is unavailable until it is repaired",
                 damage.where, damage.reason)


_encode = msgspec.json.Encoder().encode
_record_decoder = msgspec.json.Decoder(BrainRecord)
_account_decoder = msgspec.json.Decoder(Account)


class S3Transaction:
    """One change to a brain, committed by a conditional PUT of its metadata object."""

    def __init__(self, backend: S3Backend, user_id: str, brain_id: str, user_wide: bool) -> None:
        self._backend = backend
        self._user_id = user_id
        self._brain_id = brain_id
        self._account: Account | None = None
        self._account_etag: str | None = None
        if user_wide:
            self._account, self._account_etag = backend.read_account(user_id)
        self._record, self._etag = backend.read_record(user_id, brain_id, fresh=True)
        self.meta: BrainMeta | None = self._record.meta if self._record else None
        self._user_wide = user_wide

    def usage(self) -> int:
        """Bytes the user stores: this brain as read, every other brain at max(claim, actual)."""
        claims = self._account.brains if self._account else {}
        total = self.meta.stored_bytes() if self.meta else 0
        metas, damaged = self._backend.survey_brains(self._user_id)
        # a brain with damaged metadata still keeps its archives: counted by its listed blob objects
        others = [(m.id, m.stored_bytes()) for m in metas] + \
                 list(self._backend.damaged_bytes(self._user_id, damaged).items())
        for brain_id, stored in others:
            if brain_id == self._brain_id:
                continue
            claim = claims.get(brain_id)
            total += max(claim.bytes if claim else 0, stored)
        return total

    def commit(self, new: BrainMeta, blob: S3StagedBlob | None = None) -> None:
        """Upload ``blob`` (once), claim quota if user-wide, then CAS the metadata."""
        backend = self._backend
        old = self._record
        if old is None or self._etag is None:
            raise CommitConflict("brain was deleted")
        keys = dict(old.blob_keys)
        used_blob = False
        if blob is not None:
            if new.current is None:
                raise StorageError("a blob needs a current archive")
            checksum = check_checksum(new.current.checksum)
            if checksum in keys:
                blob.discard()  # identical content is already stored for this brain
            else:
                keys[checksum] = blob.upload(backend.new_blob_key(self._user_id, self._brain_id, checksum))
                used_blob = True
        wanted = new.blobs()
        keys = {c: k for c, k in keys.items() if c in wanted}
        missing = wanted - keys.keys()
        if missing:
            raise StorageError(f"metadata names blobs that are not stored: {sorted(missing)}")
        if self._user_wide:
            account = self._account or Account()
            claim = account.brains.get(self._brain_id) or Claim(since=time.time())
            brains = dict(account.brains)
            brains[self._brain_id] = Claim(
                bytes=max(old.meta.stored_bytes(), new.stored_bytes()), since=claim.since
            )
            updated = Account(generation=account.generation + 1, brains=brains)
            if not backend.put_account(self._user_id, updated, self._account_etag):
                raise CommitConflict("account changed")
            self._account, self._account_etag = updated, None  # one claim per transaction
        record = BrainRecord(meta=new, blob_keys=keys)
        if not backend.put_record(self._user_id, self._brain_id, record, self._etag):
            raise CommitConflict("metadata changed")
        if blob is not None and used_blob:
            blob.committed = True
            blob.discard()  # only closes the spool now
        self._record = record
        self.meta = new
        dropped = set(old.blob_keys.values()) - set(keys.values())
        for key in dropped:
            backend.delete_key(key)


class S3Backend:
    """The ``StorageBackend`` on one S3 bucket/prefix (safe with many replicas)."""

    blocking = True  # calls wait on the network: async callers run them in a worker thread

    def __init__(self, client: Any, bucket: Bucket, spool_dir: Path, *, probe_client: Any = None) -> None:
        self.client = client
        client.meta.events.register("after-call.s3", _refuse_missing_bucket, unique_id="brain-store-missing-bucket")
        client.meta.events.register("after-call-error.s3", _refuse_unreachable, unique_id="brain-store-unreachable")
        # readiness checks use a client with short timeouts and no retries when given
        self.probe_client = probe_client if probe_client is not None else client
        self.bucket = bucket
        self.spool_dir = Path(spool_dir)
        self.spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # the only local state: scratch space for uploads in progress (/health/ready checks it)
        self.root = self.tmp_root = self.spool_dir
        self._records: dict[str, tuple[str, BrainRecord]] = {}  # key -> (etag, record)
        # key -> (etag, what was wrong) of metadata objects found damaged: a listing showing the same
        # ETag needs no GET to know it still is (each quota-checked upload surveys the user's brains)
        self._damaged: dict[str, tuple[str, CorruptMeta]] = {}

    # -- keys ------------------------------------------------------------------------

    def meta_key(self, user_id: str, brain_id: str) -> str:
        """Key of a brain's metadata object."""
        return self.bucket.key("meta", check_id(user_id), f"{check_id(brain_id)}.json")

    def account_key(self, user_id: str) -> str:
        """Key of a user's account object."""
        return self.bucket.key("accounts", f"{check_id(user_id)}.json")

    def blob_prefix(self, user_id: str, brain_id: str) -> str:
        """Prefix of a brain's blob objects."""
        return self.bucket.key("blobs", check_id(user_id), check_id(brain_id), "")

    def new_blob_key(self, user_id: str, brain_id: str, checksum: str) -> str:
        """A fresh, never reused key for an archive with ``checksum``."""
        return f"{self.blob_prefix(user_id, brain_id)}{check_checksum(checksum)}.{uuid.uuid4().hex}"

    # -- low-level object access -------------------------------------------------------

    def _get(self, key: str, etag: str | None = None) -> tuple[str, bytes] | None | bool:
        """(etag, body); None when missing; True when unchanged since ``etag``."""
        try:
            if etag:
                reply = self.client.get_object(Bucket=self.bucket.name, Key=key, IfNoneMatch=etag)
            else:
                reply = self.client.get_object(Bucket=self.bucket.name, Key=key)
        except ClientError as exc:
            if is_not_modified(exc):
                return True
            if is_not_found(exc):
                return None
            raise
        with reply["Body"] as body:
            return str(reply["ETag"]), body.read()

    def _put_conditional(self, key: str, data: bytes, etag: str | None) -> str | None:
        """PUT with If-Match ``etag`` (or If-None-Match: * when None); new ETag or None if lost."""
        cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            reply = self.client.put_object(
                Bucket=self.bucket.name, Key=key, Body=data, ContentType="application/json", **cond
            )
        except ClientError as exc:
            if is_conflict(exc):
                return None
            raise
        return str(reply["ETag"])

    def delete_key(self, key: str) -> None:
        """Remove one object (best effort: the start-up sweep catches leftovers)."""
        try:
            self.client.delete_object(Bucket=self.bucket.name, Key=key)
        except Exception as exc:
            log.warning("could not delete %s: %s", key, exc)

    def _list(self, prefix: str) -> Iterator[dict[str, Any]]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket.name, Prefix=prefix):
            yield from page.get("Contents", [])

    # -- records and accounts -----------------------------------------------------------

    def read_record(self, user_id: str, brain_id: str, *, fresh: bool = False) -> tuple[BrainRecord | None, str | None]:
        """The brain's record and the ETag it was read with (conditional GET on a cached copy)."""
        key = self.meta_key(user_id, brain_id)
        cached = self._records.get(key)
        got = self._get(key, cached[0] if cached else None)
        if got is True and cached is not None:
            return cached[1], cached[0]
        if got is None or got is True:
            self._records.pop(key, None)
            return None, None
        etag, data = got
        try:
            record = _record_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            # our writes are whole objects, so this is outside damage: never guess, never delete
            damage = CorruptMeta(f"s3://{self.bucket.name}/{key}", str(exc))
            _log_damaged(damage)
            self._records.pop(key, None)
            if len(self._damaged) > 10_000:
                self._damaged.clear()
            self._damaged[key] = (etag, damage)
            raise damage from None
        if len(self._records) > 100_000:
            self._records.clear()
        self._records[key] = (etag, record)
        return record, etag

    def put_record(self, user_id: str, brain_id: str, record: BrainRecord, etag: str | None) -> bool:
        """Conditionally replace (or create, ``etag`` None) a brain's record; False when lost."""
        key = self.meta_key(user_id, brain_id)
        new_etag = self._put_conditional(key, _encode(record), etag)
        if new_etag is None:
            return False
        self._records[key] = (new_etag, record)
        return True

    def read_account(self, user_id: str) -> tuple[Account, str | None]:
        """The account object and its ETag (an empty account and None when there is none)."""
        got = self._get(self.account_key(user_id))
        if not isinstance(got, tuple):
            return Account(), None
        return _account_decoder.decode(got[1]), got[0]

    def put_account(self, user_id: str, account: Account, etag: str | None) -> bool:
        """Conditionally replace (or create) the account object; False when lost."""
        return self._put_conditional(self.account_key(user_id), _encode(account), etag) is not None

    def _edit_account(self, user_id: str, change: Any) -> Any:
        """Apply ``change(account) -> (result, new_account | None)`` with CAS retries."""
        for attempt in range(_ACCOUNT_ATTEMPTS):
            account, etag = self.read_account(user_id)
            result, updated = change(account)
            if updated is None:
                return result
            updated.generation = account.generation + 1
            if self.put_account(user_id, updated, etag):
                return result
            time.sleep(min(0.2, 0.005 * (attempt + 1)))
        raise CommitConflict("too much contention on the account")

    # -- reading ---------------------------------------------------------------------

    def read_meta(self, user_id: str, brain_id: str) -> BrainMeta | None:
        """Current metadata of one brain (always asks S3: another replica may have committed)."""
        record, _ = self.read_record(user_id, brain_id)
        return record.meta if record else None

    def _brain_ids(self, user_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """(brain id, listed object) of every metadata object of the user, damaged ones too."""
        prefix = self.bucket.key("meta", check_id(user_id), "")
        for item in self._list(prefix):
            name = item["Key"][len(prefix):]
            if name.endswith(".json") and SAFE_ID.match(name[:-5]):
                yield name[:-5], item

    def _read_listed(self, user_id: str) -> Iterator[tuple[str, str, BrainMeta | CorruptMeta]]:
        """What each listed metadata object holds (one LIST, GETs only for changed objects)."""
        for brain_id, item in self._brain_ids(user_id):
            where = f"s3://{self.bucket.name}/{item['Key']}"
            cached = self._records.get(item["Key"])
            if cached is not None and cached[0] == item.get("ETag"):
                yield brain_id, where, cached[1].meta
                continue
            damaged = self._damaged.get(item["Key"])
            if damaged is not None and damaged[0] == item.get("ETag"):
                _log_damaged(damaged[1])  # said on every survey, as when it was read again
                yield brain_id, where, damaged[1]
                continue
            try:
                record, _ = self.read_record(user_id, brain_id)
            except CorruptMeta as exc:  # logged
                yield brain_id, where, exc
                continue
            if record is not None:
                yield brain_id, where, record.meta

    def survey_brains(self, user_id: str) -> tuple[list[BrainMeta], list[DamagedBrain]]:
        """The user's usable brains, oldest first, and the damaged ones (``base.checked_survey``)."""
        return checked_survey(user_id, self._read_listed(user_id))

    def brain_metas(self, user_id: str) -> dict[str, BrainMeta]:
        """Every usable brain of the user by id (damaged ones are logged and left out)."""
        return {meta.id: meta for meta in self.survey_brains(user_id)[0]}

    def list_brains(self, user_id: str) -> list[BrainMeta]:
        """Every usable brain of the user, oldest first (damaged ones are logged and left out: the
        other brains stay usable)."""
        return self.survey_brains(user_id)[0]

    def usage(self, user_id: str) -> int:
        """Bytes stored for the user (every distinct archive of every brain, snapshots included; a
        brain with damaged metadata by its listed blob objects, as its metadata cannot say)."""
        return stored_total(self, user_id, *self.survey_brains(user_id))

    def damaged_bytes(self, user_id: str, damaged: list[DamagedBrain]) -> dict[str, int]:
        """Bytes of the blob objects of each of the user's ``damaged`` brains, by brain id, as the
        bucket lists them: one listing of the user's blobs for all of them (not one per brain, which
        a quota-checked upload paid every time); none when no brain is damaged."""
        sizes = dict.fromkeys((brain.brain_id for brain in damaged), 0)
        if not sizes:
            return sizes
        prefix = self.bucket.key("blobs", check_id(user_id), "")
        for item in self._list(prefix):
            brain_id = item["Key"][len(prefix):].split("/", 1)[0]
            if brain_id in sizes:
                sizes[brain_id] += int(item.get("Size", 0))
        return sizes

    def blob_key(self, user_id: str, brain_id: str, checksum: str) -> str:
        """The key holding the brain's archive with ``checksum`` (re-reads metadata if needed)."""
        from store.storage.base import BlobMissing

        key = self.meta_key(user_id, brain_id)
        cached = self._records.get(key)
        if cached is None or checksum not in cached[1].blob_keys:
            record, _ = self.read_record(user_id, brain_id)
            if record is None or checksum not in record.blob_keys:
                raise BlobMissing(checksum)
            return record.blob_keys[checksum]
        return cached[1].blob_keys[checksum]

    def open_blob(self, user_id: str, brain_id: str, checksum: str) -> BinaryIO:
        """A streaming, seekable reader of a stored archive; ``BlobMissing`` if it is gone."""
        key = self.blob_key(user_id, brain_id, check_checksum(checksum))
        return open_reader(self.client, self.bucket.name, key, checksum)

    def read_whole_blob(self, user_id: str, brain_id: str, checksum: str, size: int) -> None:
        """Object-store blobs are streamed (``open_blob``), never held whole."""
        return None

    def iter_users(self) -> Iterator[str]:
        """Users that have brain metadata."""
        prefix = self.bucket.key("meta", "")
        seen: set[str] = set()
        for item in self._list(prefix):
            user = item["Key"][len(prefix):].split("/", 1)[0]
            if user not in seen and SAFE_ID.match(user):
                seen.add(user)
                yield user

    # -- changing --------------------------------------------------------------------

    def stage(self, user_id: str, brain_id: str) -> S3StagedBlob:
        """A new spool for an upload."""
        return S3StagedBlob(self.client, self.bucket.name, self.spool_dir)

    @contextmanager
    def transaction(self, user_id: str, brain_id: str, *, user_wide: bool = False) -> Iterator[S3Transaction]:
        """A change to one brain; ``commit`` raises ``CommitConflict`` when someone was faster."""
        yield S3Transaction(self, user_id, brain_id, user_wide)

    def _create(self, meta: BrainMeta, allowed: Any) -> bool:
        """Register ``meta.id`` in the account when ``allowed(live_brain_ids)``, then create it."""
        user_id = meta.user_id
        now = time.time()

        def change(account: Account) -> tuple[bool, Account | None]:
            # every metadata object, damaged ones too: such a brain still holds its id and archives
            # (counted on local disk as well), and dropping its claim would under-count the quota
            existing = {brain_id for brain_id, _ in self._brain_ids(user_id)}
            live = existing | {
                b for b, c in account.brains.items() if now - c.since < PENDING_GRACE_SECONDS
            }
            if not allowed(live):
                return False, None
            brains = {b: c for b, c in account.brains.items() if b in live}
            brains[meta.id] = Claim(bytes=0, since=now)
            return True, Account(brains=brains)

        if not self._edit_account(user_id, change):
            return False
        if not self.put_record(user_id, meta.id, BrainRecord(meta=meta), None):
            raise StorageError("brain id already exists")
        return True

    def create_brain(self, meta: BrainMeta, max_brains: int) -> bool:
        """Create a brain unless the user already has ``max_brains`` (exact across replicas)."""
        return self._create(meta, lambda live: len(live) < max_brains)

    def create_first_brain(self, meta: BrainMeta) -> bool:
        """Create ``meta`` only if the user has no brain at all; False otherwise."""
        return self._create(meta, lambda live: not live)

    def delete_brain(self, user_id: str, brain_id: str) -> bool:
        """Remove the metadata (the brain is gone from then on), then its blobs and claim."""
        key = self.meta_key(user_id, brain_id)
        try:
            there = self.read_record(user_id, brain_id, fresh=True)[0] is not None
        except CorruptMeta:
            there = True  # damaged, still there: deleted as asked (`user purge`), as on local disk
        if not there:
            return False
        self.client.delete_object(Bucket=self.bucket.name, Key=key)
        self._records.pop(key, None)
        self._delete_prefix(self.blob_prefix(user_id, brain_id))

        def change(account: Account) -> tuple[None, Account | None]:
            if brain_id not in account.brains:
                return None, None
            return None, Account(brains={b: c for b, c in account.brains.items() if b != brain_id})

        try:
            self._edit_account(user_id, change)
        except CommitConflict:
            pass  # a stale claim only over-counts; the next create prunes it
        return True

    def _delete_prefix(self, prefix: str) -> None:
        for item in list(self._list(prefix)):
            self.delete_key(item["Key"])

    def delete_user(self, user_id: str) -> None:
        """Remove every brain of the user and the account object."""
        for brain_id, _ in list(self._brain_ids(user_id)):  # damaged ones too, as on local disk
            self.delete_brain(user_id, brain_id)
        self._delete_remains(user_id)

    def delete_empty_user(self, user_id: str) -> bool:
        """Remove the user's account object (and blob objects outside any brain) when no metadata
        object of theirs is left and no brain is being created (a claim within the grace); False
        while one is."""
        account, _ = self.read_account(user_id)
        now = time.time()
        if any(now - claim.since < PENDING_GRACE_SECONDS for claim in account.brains.values()):
            return False
        if next(self._brain_ids(user_id), None) is not None:
            return False
        self._delete_remains(user_id)
        return True

    def _delete_remains(self, user_id: str) -> None:
        """Delete the user's blob objects and account object (their brains' metadata is gone)."""
        self._delete_prefix(self.bucket.key("blobs", check_id(user_id), ""))
        self.delete_key(self.account_key(user_id))

    # -- recovery --------------------------------------------------------------------

    def ready(self) -> str | None:
        """None when the bucket answers a one-key listing of our prefix and the spool is writable."""
        if not os.access(self.spool_dir, os.W_OK):
            return "upload spool directory is not writable"
        try:
            self.probe_client.list_objects_v2(Bucket=self.bucket.name, Prefix=self.bucket.prefix, MaxKeys=1)
        except (ClientError, BotoCoreError) as exc:
            log.warning("readiness: bucket %s does not answer: %s", self.bucket.name, exc)
            return "object store bucket is not reachable"
        return None

    def startup(self, orphan_age: float = ORPHAN_AGE_SECONDS) -> None:
        """Remove blobs no metadata references and abandoned multipart uploads, once old enough.

        Young orphans are left alone: they may be uploads another replica is about to commit.
        """
        cutoff = time.time() - orphan_age
        referenced: dict[tuple[str, str], set[str] | None] = {}  # None: damaged metadata, keep all
        blobs_prefix = self.bucket.key("blobs", "")
        for item in list(self._list(blobs_prefix)):
            parts = item["Key"][len(blobs_prefix):].split("/")
            if len(parts) != 3:
                continue
            user_id, brain_id, _ = parts
            if not (SAFE_ID.match(user_id) and SAFE_ID.match(brain_id)):
                continue
            modified: datetime = item["LastModified"]
            if modified.replace(tzinfo=modified.tzinfo or UTC).timestamp() > cutoff:
                continue
            if (user_id, brain_id) in referenced:
                keys = referenced[(user_id, brain_id)]
            else:
                try:
                    record, _ = self.read_record(user_id, brain_id, fresh=True)
                except CorruptMeta:  # logged; its archives are left as they are for the operator
                    keys = None
                else:
                    keys = set(record.blob_keys.values()) if record else set()
                referenced[(user_id, brain_id)] = keys
            if keys is not None and item["Key"] not in keys:
                log.info("removing unreferenced blob %s", item["Key"])
                self.delete_key(item["Key"])
        try:
            uploads = self.client.list_multipart_uploads(Bucket=self.bucket.name, Prefix=blobs_prefix)
        except ClientError as exc:
            log.warning("cannot list multipart uploads: %s", exc)
            return
        for upload in uploads.get("Uploads", []):
            started: datetime = upload["Initiated"]
            if started.replace(tzinfo=started.tzinfo or UTC).timestamp() <= cutoff:
                try:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket.name, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                except ClientError as exc:
                    log.warning("cannot abort multipart upload %s: %s", upload["Key"], exc)
