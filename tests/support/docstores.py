"""A document store on each backend for tests (a directory, and the S3 services of tests/s3: moto,
SeaweedFS), with a way to open a second, independent store object on the same place (another replica)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.docstore import DirectoryStore, DocumentStore, open_document_store
from tests.s3.servers import CREDENTIALS, S3Service


@dataclass
class Backend:
    """A store under test and how a separate process opens the same one."""

    store: DocumentStore
    location: str
    endpoint: str = ""

    def reopen(self) -> DocumentStore:
        """A second, independent store object on the same place (another replica)."""
        return open_document_store(self.location, s3_endpoint_url=self.endpoint or None, fsync=False)


@pytest.fixture(params=["directory", "moto", "seaweedfs"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    """One document store per backend; the S3 ones on a fresh bucket of the module's S3 service."""
    if request.param == "directory":
        yield Backend(DirectoryStore(tmp_path / "docs", fsync=False), str(tmp_path / "docs"))
        return
    service: S3Service = request.getfixturevalue("moto" if request.param == "moto" else "weed")
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    location = f"s3://{service.new_bucket()}/state"
    yield Backend(open_document_store(location, s3_endpoint_url=service.endpoint), location, service.endpoint)
