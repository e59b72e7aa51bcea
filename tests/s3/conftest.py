"""Fixtures: the S3 services (one per test session and worker) and stores on them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.s3.servers import S3Service, moto_server, seaweedfs


@pytest.fixture(scope="session")
def moto() -> Iterator[S3Service]:
    with moto_server() as service:
        yield service


@pytest.fixture(scope="session")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Service]:
    with seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as service:
        yield service


@pytest.fixture(params=["moto", "seaweedfs"], scope="module")
def s3(request: pytest.FixtureRequest) -> S3Service:
    """Each S3 implementation in turn."""
    return request.getfixturevalue("moto" if request.param == "moto" else "weed")
