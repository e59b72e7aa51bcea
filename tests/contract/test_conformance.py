"""Our store, run as a real process, passes the whole conformance suite (and `brain-store check` works)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from contract.conformance import SuiteConfig, format_table, run_suite
from contract.conformance.registry import CHECKS
from tests.contract.harness import Store, running_store
from tests.support.processes import REPO_ROOT, console_script

pytestmark = pytest.mark.xdist_group("contract-conformance")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, str, str]]:
    with running_store(tmp_path_factory.mktemp("conformance") / "data") as running:
        token1 = running.add_user("alice", email="alice@example.test")
        token2 = running.add_user("bob")
        yield running, token1, token2


def test_every_check_passes(store: tuple[Store, str, str]) -> None:
    running, token1, token2 = store
    results = run_suite(SuiteConfig(url=running.url, token=token1, token2=token2))
    table = format_table(results)
    assert len(results) == len(CHECKS)
    assert [r.id for r in results if r.status != "pass"] == [], table


def test_suite_leaves_no_scratch_brains(store: tuple[Store, str, str]) -> None:
    import httpx

    running, token1, _ = store
    run_suite(SuiteConfig(url=running.url, token=token1, only=("brains.", "sync.upload")))
    listing = httpx.get(running.url + "/api/brains", headers={"Authorization": f"Bearer {token1}"}).json()
    assert [b["name"] for b in listing] == ["default"]


def _check_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([console_script("brain-store"), "check", *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)


def test_check_cli_table_and_exit_code(store: tuple[Store, str, str]) -> None:
    running, token1, token2 = store
    done = _check_cli("--url", running.url, "--token", token1, "--token2", token2, "--only", "health.status", "--only", "iso.")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS    health.status" in done.stdout
    assert "iso.foreign_brain" in done.stdout
    assert "0 failed" in done.stdout


def test_check_cli_json_and_failure_exit(store: tuple[Store, str, str]) -> None:
    running, token1, _ = store
    done = _check_cli("--url", running.url, "--token", token1, "--only", "auth.me", "--only", "iso.foreign_brain", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    by_id = {r["id"]: r for r in json.loads(done.stdout)}
    assert by_id["auth.me"]["status"] == "pass"
    assert by_id["iso.foreign_brain"]["status"] == "skip"  # no --token2
    bad = _check_cli("--url", running.url, "--token", "bst_" + "A" * 43, "--only", "auth.me")
    assert bad.returncode == 1
    assert "FAIL    auth.me" in bad.stdout


def test_check_cli_rejects_unknown_ids(store: tuple[Store, str, str]) -> None:
    running, token1, _ = store
    done = _check_cli("--url", running.url, "--token", token1, "--only", "no.such.check")
    assert done.returncode == 2
    assert "unknown check id" in done.stderr


@pytest.mark.slow
@pytest.mark.xdist_group("contract-conformance-sealed")
def test_every_check_passes_encrypted_with_two_workers(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Same suite with encryption at rest and two worker processes: clients see no difference."""
    env = {"STORE_ENCRYPTION_KEY": "11" * 32}
    with running_store(tmp_path_factory.mktemp("conformance-sealed") / "data", env=env, workers=2) as running:
        token1 = running.add_user("carol", email="carol@example.test")
        token2 = running.add_user("dave")
        results = run_suite(SuiteConfig(url=running.url, token=token1, token2=token2))
    assert [r.id for r in results if r.status != "pass"] == [], format_table(results)

