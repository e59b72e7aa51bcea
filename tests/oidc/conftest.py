"""Fixtures for OIDC tests: a real test issuer process on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.oidc_issuer import IssuerClient, start_issuer


@pytest.fixture(scope="module")
def issuer_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IssuerClient]:
    """One issuer process per test module (keys persist; counts and failures are reset per test)."""
    with start_issuer(tmp_path_factory.mktemp("issuer")) as client:
        yield client


@pytest.fixture
def issuer(issuer_process: IssuerClient) -> IssuerClient:
    """The module's issuer with counts and failure behaviour cleared."""
    issuer_process.reset()
    return issuer_process


@pytest.fixture
def fresh_issuer(tmp_path: Path) -> Iterator[IssuerClient]:
    """An issuer process of its own, for tests that rotate keys or kill it."""
    with start_issuer(tmp_path) as client:
        yield client
