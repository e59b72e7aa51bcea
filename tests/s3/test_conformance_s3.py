"""The whole conformance suite (`brain-store check`) against a store on each S3 implementation."""

from __future__ import annotations

import pytest

from contract.conformance import SuiteConfig, format_table, run_suite
from tests.contract.harness import running_store
from tests.s3.servers import S3Service

pytestmark = pytest.mark.xdist_group("s3")


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "sealed"])
def test_conformance_on_s3(s3: S3Service, tmp_path, encrypted: bool) -> None:
    env = s3.store_env(s3.new_bucket())
    if encrypted:
        env["STORE_ENCRYPTION_KEY"] = "11" * 32
    with running_store(tmp_path / "replica", env=env) as store:
        token1 = store.add_user("alice", email="alice@example.test")
        token2 = store.add_user("bob")
        results = run_suite(SuiteConfig(url=store.url, token=token1, token2=token2))
        assert [r.id for r in results if r.status != "pass"] == [], format_table(results)
