"""Our store, run as a real process, passes the whole conformance suite (and `brain-store check` works)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from contract.conformance import SuiteConfig, format_table, run_suite
from contract.conformance.registry import CHECKS
from tests.contract.harness import Store, running_store
from tests.support.processes import REPO_ROOT, console_script, free_port
from tests.support.waiting import seconds_until

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


def test_check_stops_at_once_on_a_refused_token_or_an_unreachable_store(store: tuple[Store, str, str]) -> None:
    running, token1, _ = store
    started = time.monotonic()
    bad = _check_cli("--url", running.url, "--token", "bst_" + "A" * 43)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.strip() == (f"Error: the store at {running.url} refused the token given with --token (401); "
                                  "give the token of an existing user")
    bad2 = _check_cli("--url", running.url, "--token", token1, "--token2", "bst_" + "B" * 43)
    assert bad2.returncode == 1 and "refused the token given with --token2" in bad2.stderr
    nowhere = f"http://127.0.0.1:{free_port()}"
    gone = _check_cli("--url", nowhere, "--token", token1)
    # in words (it said "cannot reach URL (ConnectError: ...)"), the system's reason kept
    assert gone.returncode == 1 and gone.stderr.startswith(f"Error: could not connect to the store at {nowhere} (")
    assert "Connection refused" in gone.stderr and "ConnectError" not in gone.stderr, gone.stderr
    assert "Traceback" not in bad.stderr + bad2.stderr + gone.stderr
    assert time.monotonic() - started < 20


def test_rate_limited_clients_share_one_pause() -> None:
    """After a 429, no client of the suite sends before Retry-After has passed (one 429, not one per client)."""
    import httpx

    from contract.conformance.context import Pacer, UserClient

    blocked_until: list[float] = []  # one second from the first request on, however late it comes
    seen: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if not blocked_until:
            blocked_until.append(time.monotonic() + 1.0)
        status = 429 if time.monotonic() < blocked_until[0] else 200
        seen.append(status)
        return httpx.Response(status, headers={"Retry-After": "1"} if status == 429 else {}, json={})

    pacer = Pacer()
    clients = [UserClient(httpx.Client(base_url="http://store.test", transport=httpx.MockTransport(answer)), t,
                          pacer=pacer) for t in ("a", "b")]
    codes: list[int] = []
    first = threading.Thread(target=lambda: codes.append(clients[0].request("GET", "/api/brains").status_code))
    first.start()
    # The second client (another thread, like the race check's writers) comes during the pause: once
    # the first one's 429 set it (after a fixed sleep, a late first thread sent after it, or beside it).
    seconds_until(lambda: pacer.not_before > 0, 30, every=0.01, what="the pause of the first client's 429")
    codes.append(clients[1].request("GET", "/api/brains").status_code)
    first.join()
    assert codes == [200, 200]
    assert seen.count(429) == 1 and pacer.rate_limited == 1 and pacer.waited >= 0.5


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



def test_uploads_settle_at_the_store_upload_rate() -> None:
    """A store taking one upload per 0.6 s and answering Retry-After: 1 early: after a few 429s the
    suite spaces its uploads instead of drawing a 429 for every one (as it did: one per upload)."""
    import httpx

    from contract.conformance.context import Pacer, UserClient

    next_upload = 0.0
    statuses: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        nonlocal next_upload
        now = time.monotonic()
        if request.method == "PUT" and now < next_upload:
            statuses.append(429)
            return httpx.Response(429, headers={"Retry-After": "1"}, json={})
        if request.method == "PUT":
            next_upload = now + 0.6
        statuses.append(200)
        return httpx.Response(200, json={})

    pacer = Pacer()
    client = UserClient(httpx.Client(base_url="http://store.test", transport=httpx.MockTransport(answer)), "t",
                        pacer=pacer)
    for _ in range(5):
        assert client.request("PUT", "/api/brains/x/sync").status_code == 200
        assert client.request("GET", "/api/brains").status_code == 200  # reads are not spaced
    assert statuses.count(429) <= 2, statuses
    assert 0.6 <= pacer.upload_gap < 2


def test_check_takes_a_url_without_scheme_and_says_when_it_is_a_connector_not_a_store(
    store: tuple[Store, str, str], tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from tests.connector.test_e2e_tools import connector

    running, token1, _ = store
    bare = running.url.removeprefix("http://")
    done = _check_cli("--url", bare, "--token", token1, "--only", "health.status")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no scheme in '{bare}': using http://{bare}" in done.stderr and "UnsupportedProtocol" not in done.stderr
    wrong = _check_cli("--url", "ftp://" + bare, "--token", token1)
    assert wrong.returncode == 2 and "starts with http:// or https://" in wrong.stderr

    with connector(tmp_path_factory.mktemp("check-connector"), running) as server:  # type: ignore[arg-type]
        mistaken = _check_cli("--url", server.base_url, "--token", token1)
    assert mistaken.returncode == 1 and mistaken.stdout == ""
    assert "looks like an MCP connector" in mistaken.stderr and "not a brain store" in mistaken.stderr
    assert "store URL" in mistaken.stderr and "Traceback" not in mistaken.stderr
