"""A moto S3 server (`moto_server` process on a free loopback port) for the backup tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.s3.servers import S3Service, moto_server


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Service]:
    # The S3 tests' own starter: one way to run moto for every test folder.
    with moto_server(tmp_path_factory.mktemp("moto")) as service:
        yield service
