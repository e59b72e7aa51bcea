"""Fixtures of the common package's tests: a document store on each backend (a directory,
and the S3 services of tests/s3: moto, SeaweedFS)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.docstore import DirectoryStore, DocumentStore, open_document_store
from tests.s3.conftest import moto, weed  # noqa: F401  (fixtures, found by name)
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
    if request.param == "directory":
        yield Backend(DirectoryStore(tmp_path / "docs", fsync=False), str(tmp_path / "docs"))
        return
    service: S3Service = request.getfixturevalue("moto" if request.param == "moto" else "weed")
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    bucket = service.new_bucket()
    location = f"s3://{bucket}/state"
    yield Backend(open_document_store(location, s3_endpoint_url=service.endpoint), location, service.endpoint)
