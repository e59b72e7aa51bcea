"""Pick the storage backend the settings ask for (local disk or S3), and its S3 client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.files import open_mode
from store.settings import StoreSettings


def s3_bucket(settings: StoreSettings) -> Any:
    """The configured bucket and prefix."""
    from store.storage.s3client import Bucket

    return Bucket.of(settings.s3_bucket, settings.s3_prefix)


def s3_client(settings: StoreSettings, *, timeout: float | None = None) -> Any:
    """A boto3 client for the configured endpoint and region (``common.s3client.make_client``)."""
    from common.s3client import make_client

    return make_client(settings.s3_endpoint_url, settings.s3_region, timeout=timeout)


# A readiness probe of the bucket gives up after this many seconds (no retries).
READY_TIMEOUT = 2.0


def open_backend(settings: StoreSettings, client: Any = None, *, serving: bool = False) -> Any:
    """The ``StorageBackend`` for the settings; a serving S3 backend also gets a quick-probe client."""
    if settings.backend == "s3":
        from store.storage.s3 import S3Backend

        probe = s3_client(settings, timeout=READY_TIMEOUT) if serving else None
        return S3Backend(
            client or s3_client(settings), s3_bucket(settings), settings.data_dir / "spool", probe_client=probe
        )
    from store.storage.local import LocalBackend

    return LocalBackend(settings.data_dir, fsync=settings.fsync)


def prepare_storage(settings: StoreSettings) -> None:
    """Before serving: S3 must honour conditional writes (else ``ConditionalWritesUnsupported``);
    then crash leftovers are removed."""
    if settings.backend == "s3":
        from store.storage.s3probe import probe_conditional_writes

        client = s3_client(settings)
        probe_conditional_writes(client, s3_bucket(settings), settings.s3_endpoint_url or "S3")
        open_backend(settings, client).startup()
        return
    backend = open_backend(settings)
    refuse_open_data_dir(settings.data_dir)
    backend.startup()


def refuse_open_data_dir(data_dir: Path) -> None:
    """Refuse to serve from a data directory others can write: they could put a users.json of
    their own there (a token of theirs for anyone's brains, decrypted by the store). The
    connector refuses such a state directory the same way."""
    if (mode := open_mode(data_dir)) is not None:
        raise RuntimeError(f"data directory {data_dir} is writable by others (mode {mode:o}); "
                           f"make it private: chmod 700 {data_dir}")
