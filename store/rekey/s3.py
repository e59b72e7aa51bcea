"""`brain-store rekey` on the S3 backend: re-seal every archive under a new master key.

Blobs are immutable, so a re-sealed archive goes to a fresh key and the brain's
metadata object is switched to it with the usual conditional write; an upload
committing meanwhile wins and the brain is simply re-read and done again. Old blobs
are removed only after the switch. Replicas must accept both keys during the roll
(``STORE_ENCRYPTION_KEY`` new, ``STORE_ENCRYPTION_PREVIOUS_KEYS`` old), as on disk.
Idempotent: blobs already sealed with the new key are kept as they are.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

import msgspec

from store.rekey import RekeyReport, note_damaged, refused
from store.settings import StoreSettings
from store.storage import sealing
from store.storage.s3 import BrainRecord, S3Backend
from store.storage.s3blob import open_reader
from store.storage.s3client import upload_file

_ATTEMPTS = 8


def rekey_bucket(
    settings: StoreSettings, backend: S3Backend, new_key: bytes, progress: Callable[[str], None] = lambda line: None
) -> RekeyReport:
    """Re-seal every blob of every brain in the bucket with ``new_key``."""
    masters = [k for k in (settings.encryption_key, *settings.previous_keys) if k]
    report = RekeyReport()
    for user_id in list(backend.iter_users()):
        new_user_key = sealing.derive_user_key(new_key, user_id)
        new_id = sealing.key_id(new_user_key)
        old_keys = [sealing.derive_user_key(k, user_id) for k in masters] + [new_user_key]
        metas, damaged = backend.survey_brains(user_id)
        note_damaged(report, damaged, progress)
        for brain_id in [meta.id for meta in metas]:
            report.brains += 1
            for _ in range(_ATTEMPTS):
                if _rekey_brain(backend, user_id, brain_id, new_user_key, new_id, old_keys, report, progress):
                    break
    return report


def _rekey_brain(
    backend: S3Backend, user_id: str, brain_id: str, new_user_key: bytes, new_id: bytes,
    old_keys: list[bytes], report: RekeyReport, progress: Callable[[str], None],
) -> bool:
    """One attempt for one brain; False when an upload committed meanwhile (try again)."""
    record, etag = backend.read_record(user_id, brain_id, fresh=True)
    if record is None:
        return True
    keys = dict(record.blob_keys)
    fresh: dict[str, str] = {}
    try:
        for checksum, key in record.blob_keys.items():
            with open_reader(backend.client, backend.bucket.name, key, checksum) as src:
                head = bytes(src.peek(sealing.HEADER_SIZE)[: sealing.HEADER_SIZE])
                sealed = sealing.is_sealed(head)
                if sealed and sealing.read_key_id(head) == new_id:
                    report.skipped += 1
                    continue
                with tempfile.TemporaryFile(dir=backend.spool_dir) as spool:
                    try:
                        sealing.reseal(src, spool, old_key=old_keys if sealed else None, new_key=new_user_key,
                                       user_id=user_id, brain_id=brain_id, checksum=checksum)
                    except sealing.SealError as exc:
                        raise refused(f"{user_id}/{brain_id}/{checksum}", exc) from None
                    spool.flush()
                    target = backend.new_blob_key(user_id, brain_id, checksum)
                    upload_file(backend.client, backend.bucket.name, target, spool, os.fstat(spool.fileno()).st_size)
            fresh[checksum] = target
            keys[checksum] = target
        if not fresh:
            return True
        meta = msgspec.structs.replace(record.meta, generation=record.meta.generation + 1)
        if not backend.put_record(user_id, brain_id, BrainRecord(meta=meta, blob_keys=keys), etag):
            raise _Lost()
    except _Lost:
        for target in fresh.values():
            backend.delete_key(target)
        return False
    except BaseException:
        for target in fresh.values():
            backend.delete_key(target)
        raise
    for checksum in fresh:
        backend.delete_key(record.blob_keys[checksum])
        report.resealed += 1
        progress(f"re-sealed {user_id}/{brain_id}/{checksum[:12]}")
    return True


class _Lost(Exception):
    """The metadata changed while re-sealing."""
