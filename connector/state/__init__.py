"""The connector's state: what replicas share, in one directory or one S3 bucket.

``open_state`` is the one place that chooses the backend: ``CONNECTOR_STATE_URL``
(``s3://bucket/prefix``) puts the state in a bucket, else ``CONNECTOR_STATE_DIR`` in a
directory; with neither the state lives in each process's memory (None). ``oauth/``,
``workcopy/`` and ``webapp/`` reach the state only through this package: sealing
(``connector.state.sealing``), private directories (``connector.state.files``) and the
document store returned here (``common.docstore``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from common.docstore import DocumentStore
    from connector.settings import ConnectorSettings


def open_state(settings: ConnectorSettings, *, fsync: bool = True) -> DocumentStore | None:
    """The document store holding the connector's shared state, or None when it lives in memory.

    ``fsync=False`` is for documents a crash may lose at no cost (brain heads, limit counters):
    in a directory their writes skip the fsync (~15 ms on a busy disk); on S3 it changes nothing.
    """
    # Imported here: boto3 loads only when a bucket is used.
    from common.docstore import open_document_store

    location = settings.state_url or settings.state_dir
    if location is None:
        return None
    return open_document_store(location, s3_endpoint_url=settings.s3_endpoint_url, s3_region=settings.s3_region,
                               fsync=fsync)
