"""Fixtures of the connector state's tests: one document store per backend (directory, moto, SeaweedFS)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.docstore import DirectoryStore, DocumentStore, open_document_store
from tests.s3.conftest import moto, weed  # noqa: F401  (fixtures, found by name)
from tests.s3.servers import CREDENTIALS, S3Service


@dataclass
class Place:
    """Where a state lives, and how a second replica opens the same place."""

    docs: DocumentStore
    location: str
    endpoint: str = ""

    def replica(self) -> DocumentStore:
        """An independent store object on the same place (what another replica holds)."""
        return open_document_store(self.location, s3_endpoint_url=self.endpoint or None, fsync=False)


@pytest.fixture(params=["directory", "moto", "seaweedfs"])
def place(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Place]:
    if request.param == "directory":
        yield Place(DirectoryStore(tmp_path / "state", fsync=False), str(tmp_path / "state"))
        return
    service: S3Service = request.getfixturevalue("moto" if request.param == "moto" else "weed")
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    location = f"s3://{service.new_bucket()}/connector"
    yield Place(open_document_store(location, s3_endpoint_url=service.endpoint), location, service.endpoint)
