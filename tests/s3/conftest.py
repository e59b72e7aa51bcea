"""Fixtures: stores on the S3 services (moto and weed, one per test process: tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.s3.servers import S3Service


@pytest.fixture(params=["moto", "seaweedfs"], scope="module")
def s3(request: pytest.FixtureRequest) -> S3Service:
    """Each S3 implementation in turn."""
    return request.getfixturevalue("moto" if request.param == "moto" else "weed")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One xdist group per S3 service, so `make test` (-n 2) runs moto and SeaweedFS tests side
    by side and each service starts once per session."""
    for item in items:
        if "tests/s3/" not in str(item.fspath).replace("\\", "/"):
            continue
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        service = params.get("s3") or {"weed": "seaweedfs"}.get(params.get("service", ""), params.get("service"))
        names = set(getattr(item, "fixturenames", ()))
        if service is None:
            service = "seaweedfs" if "weed" in names else "moto"
        item.add_marker(pytest.mark.xdist_group(f"s3-{service}"))
