"""Re-seal every stored archive under a new master key while the store keeps serving.

Each brain is handled under its brain lock, so no upload or restore of that brain
commits meanwhile. Each blob is re-sealed into a temporary file (checked against its
checksum while copying), fsynced and renamed over the old blob; a download that had
already opened the old blob keeps reading the old inode. Running servers must accept
both keys during the roll (``STORE_ENCRYPTION_KEY`` new, ``STORE_ENCRYPTION_PREVIOUS_KEYS``
old). Plain (never sealed) archives are sealed. Idempotent: blobs already sealed with
the new key are skipped, so an interrupted rekey can simply be run again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from common.files import open_regular
from store.settings import StoreSettings
from store.storage import sealing
from store.storage.base import DamagedBrain
from store.storage.local import LocalBackend, fsync_dir


class RekeyError(Exception):
    """An archive could not be opened (no configured key opens it, or it is damaged); the
    message names it. Archives re-sealed before it stay re-sealed: running again resumes."""


def refused(where: str, exc: sealing.SealError) -> RekeyError:
    """The error for the archive at ``where`` (user/brain/checksum) that ``exc`` refused."""
    return RekeyError(f"{where}: {exc}")


@dataclass
class RekeyReport:
    """What a rekey did."""

    brains: int = 0
    resealed: int = 0
    skipped: int = 0
    # brains left as they are because their metadata is damaged (which archives it names is
    # unknown): "user/brain (metadata WHERE: REASON)"; their archives keep the old key
    damaged: list[str] = field(default_factory=list)


def note_damaged(report: RekeyReport, damaged: list[DamagedBrain], progress: Callable[[str], None]) -> None:
    """Note brains left out for damaged metadata in ``report`` and say so."""
    for broken in damaged:
        report.damaged.append(broken.describe())
        progress(f"brain {broken.describe()}: NOT re-sealed, its metadata is damaged")


def rekey_data_dir(
    settings: StoreSettings, new_key: bytes, progress: Callable[[str], None] = lambda line: None
) -> RekeyReport:
    """Re-seal every blob of every brain in ``settings.data_dir`` with ``new_key``."""
    backend = LocalBackend(settings.data_dir, fsync=settings.fsync)
    masters = [k for k in (settings.encryption_key, *settings.previous_keys) if k]
    report = RekeyReport()
    for user_id in backend.iter_users():
        new_user_key = sealing.derive_user_key(new_key, user_id)
        new_id = sealing.key_id(new_user_key)
        old_keys = [sealing.derive_user_key(k, user_id) for k in masters] + [new_user_key]
        metas, damaged = backend.survey_brains(user_id)
        note_damaged(report, damaged, progress)
        for meta in metas:
            report.brains += 1
            with backend.transaction(user_id, meta.id) as tx:
                current = tx.meta
                if current is None:
                    continue
                for checksum in sorted(current.blobs()):
                    path = backend.blob_path(user_id, meta.id, checksum)
                    with open_regular(path, buffering=-1) as src:  # a named pipe there would hang the run
                        head = src.read(sealing.HEADER_SIZE)
                        src.seek(0)
                        if sealing.is_sealed(head) and sealing.read_key_id(head) == new_id:
                            report.skipped += 1
                            continue
                        staged = backend.stage(user_id, meta.id)
                        try:
                            sealing.reseal(
                                src,
                                staged.file,
                                old_key=old_keys if sealing.is_sealed(head) else None,
                                new_key=new_user_key,
                                user_id=user_id,
                                brain_id=meta.id,
                                checksum=checksum,
                            )
                            staged.finish()
                            os.rename(staged.path, path)
                            staged.committed = True
                        except sealing.SealError as exc:
                            raise refused(f"{user_id}/{meta.id}/{checksum}", exc) from None
                        finally:
                            staged.discard()
                    if settings.fsync:
                        fsync_dir(path.parent)
                    report.resealed += 1
                    progress(f"re-sealed {user_id}/{meta.id}/{checksum[:12]}")
    return report
