"""A moto S3 server for the backup tests (S5's helper), one per session and worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.s3.servers import S3Service, moto_server


@pytest.fixture(scope="session")
def moto() -> Iterator[S3Service]:
    with moto_server() as service:
        yield service
