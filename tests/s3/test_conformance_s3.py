"""The whole conformance suite (`brain-store check`) against a store on each S3 implementation."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.conformance import SuiteConfig, format_table, run_suite
from tests.contract.harness import running_store
from tests.s3.servers import S3Service, wait_for_token

# xdist groups (one per S3 service) are set in conftest.py


@pytest.mark.parametrize(
    ("service", "encrypted"),
    [("moto", False), ("weed", False), ("weed", True)],
    ids=["moto-plain", "seaweedfs-plain", "seaweedfs-sealed"],
)
def test_conformance_on_s3(request: pytest.FixtureRequest, tmp_path: Path, service: str, encrypted: bool) -> None:
    s3: S3Service = request.getfixturevalue(service)
    env = s3.store_env(s3.new_bucket())
    if encrypted:
        env["STORE_ENCRYPTION_KEY"] = "11" * 32
    with running_store(tmp_path / "replica", env=env) as store:
        token1 = store.add_user("alice", email="alice@example.test")
        token2 = store.add_user("bob")
        for token in (token1, token2):  # the CLI wrote the users object; the replica polls it
            wait_for_token(store.url, token)
        results = run_suite(SuiteConfig(url=store.url, token=token1, token2=token2))
        assert [r.id for r in results if r.status != "pass"] == [], format_table(results)
