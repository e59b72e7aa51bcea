"""Two store replicas (separate processes, different ports) on one bucket."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from tests.contract.harness import Store, running_store
from tests.s3.archives import archive, big_archive, counter_archive, read_counter
from tests.s3.servers import S3Service, wait_for_token

# xdist groups (one per S3 service) are set in conftest.py


@contextmanager
def two_replicas(s3: S3Service, tmp_path: Path, **extra: str) -> Iterator[tuple[Store, Store, dict[str, str]]]:
    env = {**s3.store_env(s3.new_bucket()), **extra}
    with ExitStack() as stack:
        a = stack.enter_context(running_store(tmp_path / "a" / "spool", env=env, log_name="a.log"))
        b = stack.enter_context(running_store(tmp_path / "b" / "spool", env=env, log_name="b.log"))
        yield a, b, env


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _brain(url: str, token: str) -> str:
    _wait_token(url, token, 200)
    return str(httpx.get(url + "/api/brains", headers=_auth(token), timeout=30).json()[0]["id"])


def _wait_token(url: str, token: str, status: int, timeout: float = 10.0) -> float:
    """Seconds until ``/auth/me`` with ``token`` answers ``status`` (fails after ``timeout``)."""
    started = time.monotonic()
    while True:
        code = httpx.get(url + "/auth/me", headers=_auth(token), timeout=10).status_code
        if code == status:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout, f"{url}: still {code}, expected {status}"
        time.sleep(0.1)


def user_on_both(a: Store, b: Store, name: str) -> str:
    """A new user's token, once both replicas accept it."""
    token = a.add_user(name)
    for url in (a.url, b.url):
        wait_for_token(url, token)
    return token


def test_racing_if_match_uploads_exactly_one_wins_per_round(s3: S3Service, tmp_path: Path) -> None:
    rounds, writers = 50, 16
    with two_replicas(s3, tmp_path) as (a, b, _):
        token = user_on_both(a, b, "racer")
        brain = _brain(a.url, token)
        first = httpx.put(f"{a.url}/api/brains/{brain}/sync", headers=_auth(token),
                          files={"brain": ("b.tgz", archive({"start": b"0"}))}, timeout=30)
        base = first.json()["checksum"]
        bodies = [[archive({f"r{r}": f"{r}-{w}".encode()}) for w in range(writers)] for r in range(rounds)]

        async def run() -> list[str]:
            winners: list[str] = []
            limits = httpx.Limits(max_connections=writers)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                current = base
                for r in range(rounds):
                    async def put(w: int, cur: str = current, r: int = r) -> httpx.Response:
                        url = (a.url if w % 2 else b.url) + f"/api/brains/{brain}/sync"
                        return await client.put(url, headers={**_auth(token), "If-Match": f'"{cur}"'},
                                                files={"brain": ("b.tgz", bodies[r][w])})
                    replies = await asyncio.gather(*(put(w) for w in range(writers)))
                    codes = sorted(x.status_code for x in replies)
                    assert codes == [200] + [412] * (writers - 1), f"round {r}: {codes}"
                    current = next(x for x in replies if x.status_code == 200).json()["checksum"]
                    # every loser is told the winner's checksum, never a third state
                    assert {x.json()["current_checksum"] for x in replies if x.status_code == 412} == {current}
                    winners.append(current)
            return winners

        winners = asyncio.run(run())
        for url in (a.url, b.url):
            got = httpx.get(f"{url}/api/brains/{brain}/sync", headers=_auth(token), timeout=30)
            assert got.headers["x-checksum"] == winners[-1]


def test_read_modify_write_counter_loses_no_increment(weed: S3Service, tmp_path: Path) -> None:
    workers, increments = 6, 8
    with two_replicas(weed, tmp_path) as (a, b, _):
        token = user_on_both(a, b, "counter")
        brain = _brain(a.url, token)
        httpx.put(f"{a.url}/api/brains/{brain}/sync", headers=_auth(token),
                  files={"brain": ("b.tgz", counter_archive(0))}, timeout=30).raise_for_status()
        errors: list[str] = []

        def worker(n: int) -> None:
            url = (a.url if n % 2 else b.url) + f"/api/brains/{brain}/sync"
            with httpx.Client(timeout=60, headers=_auth(token)) as client:
                done = 0
                for _ in range(500):  # bounded retries
                    if done == increments:
                        return
                    got = client.get(url)
                    value = read_counter(got.content)
                    put = client.put(url, headers={"If-Match": got.headers["etag"]},
                                     files={"brain": ("b.tgz", counter_archive(value + 1))})
                    if put.status_code == 200:
                        done += 1
                    elif put.status_code != 412:
                        errors.append(f"{put.status_code} {put.text}")
                        return
                errors.append(f"worker {n} did not finish")

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        assert errors == []
        final = httpx.get(f"{b.url}/api/brains/{brain}/sync", headers=_auth(token), timeout=30)
        assert read_counter(final.content) == workers * increments


def test_users_changes_reach_the_other_replica_within_seconds(moto: S3Service, tmp_path: Path) -> None:
    with two_replicas(moto, tmp_path) as (a, b, env):
        token = a.add_user("carol")  # the CLI writes the users object in the bucket
        for url in (a.url, b.url):
            assert _wait_token(url, token, 200) < 5
        from tests.s3.cli import run_cli

        new_token = run_cli(env, "user", "rotate", "carol").strip().splitlines()[-1]
        for url in (a.url, b.url):
            assert _wait_token(url, token, 401) < 5
            assert _wait_token(url, new_token, 200) < 5
        run_cli(env, "user", "remove", "carol")
        for url in (a.url, b.url):
            assert _wait_token(url, new_token, 401) < 5


def test_a_damaged_users_object_is_served_from_its_last_good_copy(moto: S3Service, tmp_path: Path) -> None:
    # As on disk (tests/store/test_damaged_state_files.py): every edit writes users.json.last-good
    # first, so a damaged object is never read as empty nor as what a replica read before.
    with two_replicas(moto, tmp_path) as (a, b, env):
        token = a.add_user("dana")
        for url in (a.url, b.url):
            _wait_token(url, token, 200)
        from tests.s3.cli import run_cli

        new_token = run_cli(env, "user", "rotate", "dana").strip().splitlines()[-1]
        key = f"{env['STORE_S3_PREFIX']}/users.json"
        client = moto.client()
        good = client.get_object(Bucket=env["STORE_S3_BUCKET"], Key=key)["Body"].read()
        client.put_object(Bucket=env["STORE_S3_BUCKET"], Key=key, Body=good[: len(good) // 2])
        for url in (a.url, b.url):
            assert _wait_token(url, token, 401) < 5  # the rotation holds on every replica
            assert _wait_token(url, new_token, 200) < 5
            deadline = time.monotonic() + 5
            while (ready := httpx.get(url + "/health/ready", timeout=10).json())["status"] != "degraded":
                assert time.monotonic() < deadline, ready
                time.sleep(0.1)
            assert "users.json is unreadable or corrupt" in " ".join(ready["damaged"])
        with pytest.raises(AssertionError, match="fix or restore it first"):
            run_cli(env, "user", "add", "erin")
        after = client.get_object(Bucket=env["STORE_S3_BUCKET"], Key=key)["Body"].read()
        assert after == good[: len(good) // 2]  # never written over


def test_sigkill_during_uploads_leaves_no_visible_partial_state(weed: S3Service, tmp_path: Path) -> None:
    with two_replicas(weed, tmp_path) as (a, b, env):
        token = user_on_both(a, b, "crashy")
        brains = [_brain(a.url, token)]
        for n in range(3):
            brains.append(httpx.post(f"{a.url}/api/brains", headers=_auth(token), json={"name": f"b{n}"},
                                     timeout=30).json()["id"])
        payloads = [big_archive(3 * 1024 * 1024 if i % 2 else 20 * 1024 * 1024, i) for i in range(4)]

        def upload_forever(brain: str, data: bytes) -> None:
            with httpx.Client(timeout=60, headers=_auth(token)) as client:
                for _ in range(50):
                    try:
                        client.put(f"{a.url}/api/brains/{brain}/sync", files={"brain": ("b.tgz", data)})
                    except httpx.HTTPError:
                        return

        threads = [threading.Thread(target=upload_forever, args=(brains[i], payloads[i]), daemon=True) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(4)
        a.server.kill()
        for t in threads:
            t.join(timeout=60)
        with httpx.Client(timeout=60, headers=_auth(token)) as client:
            listing = {x["id"]: x for x in client.get(f"{b.url}/api/brains").json()}
            assert set(listing) == set(brains)
            for brain in brains:
                got = client.get(f"{b.url}/api/brains/{brain}/sync")
                if listing[brain]["checksum"] is None:
                    assert got.status_code == 404
                    continue
                import hashlib

                assert got.status_code == 200
                assert hashlib.sha256(got.content).hexdigest() == got.headers["x-checksum"]
                assert got.headers["x-checksum"] == client.get(f"{b.url}/api/brains/{brain}").json()["checksum"]
            # the surviving replica keeps serving writes
            done = client.put(f"{b.url}/api/brains/{brains[0]}/sync", files={"brain": ("b.tgz", archive({"x": b"1"}))})
            assert done.status_code == 200
        # leftovers of the killed replica are invisible and the start-up sweep removes them
        from tests.s3.cli import backend_for

        backend = backend_for(weed, env, tmp_path / "sweep")
        backend.startup(orphan_age=0)
        referenced = set()
        for user in backend.iter_users():
            for meta in backend.list_brains(user):
                record, _ = backend.read_record(user, meta.id)
                referenced |= set(record.blob_keys.values())
        stored = set(weed.keys(env["STORE_S3_BUCKET"], "store/blobs/"))
        assert stored == referenced


def test_quota_and_brain_limit_hold_across_replicas(weed: S3Service, tmp_path: Path) -> None:
    with two_replicas(weed, tmp_path, STORE_MAX_USER_MB="1", STORE_MAX_BRAINS="4") as (a, b, _):
        token = user_on_both(a, b, "frugal")
        urls = [a.url, b.url]

        async def burst(requests: list[tuple[str, str, dict]]) -> list[int]:  # type: ignore[type-arg]
            async with httpx.AsyncClient(timeout=60, headers=_auth(token)) as client:
                replies = await asyncio.gather(*(client.request(m, u, **kw) for m, u, kw in requests))
            return [r.status_code for r in replies]

        # six concurrent creations spread over both replicas: the account already has `default`
        codes = asyncio.run(burst([("POST", f"{urls[i % 2]}/api/brains", {"json": {"name": f"n{i}"}})
                                   for i in range(6)]))
        assert sorted(codes) == [201] * 3 + [403] * 3
        brains = [x["id"] for x in httpx.get(a.url + "/api/brains", headers=_auth(token)).json()]
        assert len(brains) == 4
        # four concurrent 600 KiB uploads to four brains: the 1 MiB quota admits exactly one
        payloads = [big_archive(600 * 1024, i) for i in range(4)]
        codes = asyncio.run(burst([("PUT", f"{urls[i % 2]}/api/brains/{brains[i]}/sync",
                                    {"files": {"brain": ("b.tgz", payloads[i])}}) for i in range(4)]))
        assert sorted(codes) == [200, 413, 413, 413]
        used = httpx.get(b.url + "/auth/me", headers=_auth(token)).json()["storage_used"]
        assert 600 * 1024 < used <= 1024 * 1024
