"""Encryption at rest in the service: sealed blobs, refusal of unsealed files, rekey, and a
store started without the key of its sealed archives."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from store.errors import ServiceError
from store.rekey import rekey_data_dir
from store.service import BrainService
from store.settings import StoreSettings
from store.storage import sealing
from store.storage.local import LocalBackend
from tests.store.conftest import add_user, brain_files, make_archive, start_store
from tests.store.test_service import USER, put
from tests.support.processes import console_script, run_command

KEY1 = bytes(range(32))
KEY2 = bytes(range(32, 64))


def service_with(data: Path, key: bytes | None, previous: tuple[bytes, ...] = ()) -> BrainService:
    env = {"STORE_ENCRYPTION_KEY": key.hex()} if key else {}
    if previous:
        env["STORE_ENCRYPTION_PREVIOUS_KEYS"] = ",".join(k.hex() for k in previous)
    settings = StoreSettings.from_env(env, data_dir=data, fsync=False)
    return BrainService(settings, LocalBackend(data, fsync=False))


def download(service: BrainService, brain_id: str, version: str | None = None) -> bytes:
    dl = service.open_download(USER, brain_id, version)
    try:
        if dl.body is not None:
            return bytes(dl.body)
        assert dl.chunks is not None
        return b"".join(dl.chunks)
    finally:
        dl.close()


def test_blobs_are_sealed_and_bound(tmp_path: Path) -> None:
    data = tmp_path / "data"
    service = service_with(data, KEY1)
    brain = service.create(USER)
    other = service.create(USER, "other")
    a, b = make_archive(brain_files(3, "a")), make_archive(brain_files(3, "b"))
    put(service, brain.id, a)
    ref = put(service, brain.id, b)
    assert ref.checksum == hashlib.sha256(b).hexdigest() and ref.size == len(b) and ref.file_count == 3
    blob = service.backend.brain_dir(USER, brain.id) / "blobs" / ref.checksum
    raw = blob.read_bytes()
    assert sealing.is_sealed(raw) and b not in raw
    assert download(service, brain.id) == b
    snap = service.get(USER, brain.id).snapshots[0]
    assert download(service, brain.id, snap.name) == a
    # a sealed file moved to another brain does not open there
    put(service, other.id, a)
    other_blob = service.backend.brain_dir(USER, other.id) / "blobs" / hashlib.sha256(a).hexdigest()
    shutil.copy(service.backend.brain_dir(USER, brain.id) / "blobs" / snap.archive.checksum, other_blob)
    with pytest.raises(ServiceError) as info:
        download(service, other.id)
    assert info.value.status == 500
    # an unsealed file where a sealed one belongs is refused, not served
    blob.write_bytes(b)
    with pytest.raises(ServiceError) as info:
        download(service, brain.id)
    assert info.value.status == 500


def test_sealed_store_without_key_refuses(tmp_path: Path) -> None:
    data = tmp_path / "data"
    service = service_with(data, KEY1)
    brain = service.create(USER)
    put(service, brain.id, make_archive(brain_files(1)))
    keyless = service_with(data, None)
    with pytest.raises(ServiceError) as info:
        download(keyless, brain.id)
    assert info.value.status == 503 and info.value.extra == {"code": "encryption_key_unavailable"}
    assert keyless.key_problem is not None and "STORE_ENCRYPTION_KEY" in keyless.key_problem


def test_rekey_rolls_without_losing_anything(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # start plain, then turn encryption on with KEY1, then roll to KEY2
    plain = service_with(data, None)
    brain = plain.create(USER)
    archives = [make_archive(brain_files(2, str(i))) for i in range(3)]
    put(plain, brain.id, archives[0])
    report = rekey_data_dir(plain.settings, KEY1)
    assert report.resealed == 1
    one = service_with(data, KEY1)
    assert download(one, brain.id) == archives[0]
    put(one, brain.id, archives[1])
    put(one, brain.id, archives[2])
    # roll: servers accept both, rekey re-seals with KEY2 (idempotent on rerun)
    rolling = service_with(data, KEY2, (KEY1,))
    assert download(rolling, brain.id) == archives[2]
    report = rekey_data_dir(one.settings, KEY2)
    assert report.resealed == 3 and report.skipped == 0
    assert rekey_data_dir(one.settings, KEY2).skipped == 3
    two = service_with(data, KEY2)
    assert download(two, brain.id) == archives[2]
    for snap in two.get(USER, brain.id).snapshots:
        assert download(two, brain.id, snap.name) in archives
    with pytest.raises(ServiceError):
        download(service_with(data, KEY1), brain.id)
    assert os.listdir(two.backend.tmp_root) == []


def _rekey_cli(data: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, **env}
    return run_command([console_script("brain-store"), "rekey", "--new-key", KEY2.hex(), "--data", str(data)],
                       timeout=60, env=full)


def test_rekey_without_the_old_key_says_which_archive(tmp_path: Path) -> None:
    data = tmp_path / "data"
    service = service_with(data, KEY1)
    brain = service.create(USER)
    ref = put(service, brain.id, make_archive(brain_files(1)))
    done = _rekey_cli(data, {"STORE_ENCRYPTION_KEY": ""})  # the operator forgot the old key
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert f"{USER}/{brain.id}/{ref.checksum}" in done.stderr and "STORE_ENCRYPTION_KEY" in done.stderr
    assert download(service, brain.id)  # nothing changed


def test_rekey_refuses_a_data_directory_that_does_not_exist(tmp_path: Path) -> None:
    done = _rekey_cli(tmp_path / "typo", {"STORE_ENCRYPTION_KEY": KEY1.hex()})
    assert done.returncode == 1 and "no such data directory" in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "typo").exists()


def test_rekey_takes_the_new_key_from_the_environment(tmp_path: Path) -> None:
    """On the command line the key is readable by every local user (ps) while rekey runs."""
    data = tmp_path / "data"
    service = service_with(data, KEY1)
    brain = service.create(USER)
    archive = make_archive(brain_files(1))
    put(service, brain.id, archive)
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")},
            "STORE_ENCRYPTION_KEY": KEY1.hex(), "NEW_ENCRYPTION_KEY": KEY2.hex()}
    done = run_command([console_script("brain-store"), "rekey", "--data", str(data)], timeout=60, env=full)
    assert done.returncode == 0 and "re-sealed 1 blob(s)" in done.stdout, done.stdout + done.stderr
    assert download(service_with(data, KEY2), brain.id) == archive


def _serve_exits(data: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``brain-store serve`` on ``data``, which must end by itself (a store that starts fails the test)."""
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, "STORE_QUIET": "1", **env}
    argv = [console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", "0", "--data", str(data)]
    try:
        return run_command(argv, timeout=30, env=full)
    except subprocess.TimeoutExpired:
        pytest.fail("the store started on sealed archives its keys cannot open")


@pytest.mark.parametrize("env", [{}, {"STORE_ENCRYPTION_KEY": KEY2.hex()}], ids=["no-key", "wrong-key"])
def test_serve_refuses_sealed_archives_it_cannot_open(tmp_path: Path, env: dict[str, str]) -> None:
    data = tmp_path / "data"
    service = service_with(data, KEY1)
    brain = service.create(USER)
    put(service, brain.id, make_archive(brain_files(1)))
    done = _serve_exits(data, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "listening on" not in done.stdout, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "STORE_ENCRYPTION_KEY" in lines[0], done.stderr
    assert download(service, brain.id)  # nothing changed


def test_serve_starts_when_a_key_opens_the_archives_and_on_plain_data(tmp_path: Path) -> None:
    sealed, plain = tmp_path / "sealed", tmp_path / "plain"
    service = service_with(sealed, KEY1)
    put(service, service.create(USER).id, make_archive(brain_files(1)))
    keyless = service_with(plain, None)
    put(keyless, keyless.create(USER).id, make_archive(brain_files(1)))
    rolling = {"STORE_ENCRYPTION_KEY": KEY2.hex(), "STORE_ENCRYPTION_PREVIOUS_KEYS": KEY1.hex()}
    # the key during a rotation; plain data without a key
    for data, env in ((sealed, rolling), (plain, {})):
        with start_store(tmp_path, data=data, env=env) as store:
            assert httpx.get(store.url + "/health/ready", timeout=30).status_code == 200


def test_serve_refuses_a_key_over_plain_archives(tmp_path: Path) -> None:
    """Encryption turned on without sealing the archives first: the store started, said ready,
    and then answered 500 to every download. It now stops with one line saying what to run."""
    data = tmp_path / "data"
    service = service_with(data, None)
    brain = service.create(USER)
    archive = make_archive(brain_files(1))
    put(service, brain.id, archive)
    done = _serve_exits(data, {"STORE_ENCRYPTION_KEY": KEY1.hex()})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "listening on" not in done.stdout, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not encrypted at rest" in lines[0] and "brain-store rekey" in lines[0], done.stderr
    assert download(service, brain.id) == archive  # nothing changed



def test_serve_starts_when_an_archive_it_samples_cannot_be_read(tmp_path: Path) -> None:
    """The start-up key check is a sample: a blob that cannot be read (here a directory where the
    file should be) is skipped and logged, as serving did before the check; it ended `serve` with
    a traceback."""
    data = tmp_path / "data"
    service = service_with(data, None)
    brain_id = service.create(USER).id
    put(service, brain_id, make_archive(brain_files(1)))
    (blob,) = (data / "brains" / USER / brain_id / "blobs").iterdir()
    blob.unlink()
    blob.mkdir()
    with start_store(tmp_path, data=data) as store:
        assert httpx.get(store.url + "/health/ready", timeout=30).status_code == 200
    assert any("key check: skipping brain" in log.read_text() for log in tmp_path.glob("store-*.log"))


@pytest.mark.parametrize("key", [None, KEY2], ids=["no-key", "wrong-key"])
def test_a_sealed_archive_the_store_cannot_open_is_503_and_unready(tmp_path: Path, key: bytes | None) -> None:
    """Archives sealed after start-up (another process, another replica) under a key this store
    lacks: a clear 503 with a stable code. With no key at all /health/ready says why until a
    restart; with a key that opens the others, only that archive is refused (one blob sealed
    under a newer key, or with a damaged header, must not take the replica out of service)."""
    data = tmp_path / "data"
    token = add_user(data, "alice")
    env = {"STORE_ENCRYPTION_KEY": key.hex()} if key else {}
    with start_store(tmp_path, data=data, env=env) as store:
        client = store.client(token)
        assert client.get("/health/ready").status_code == 200
        user_id = client.get("/auth/me").json()["user"]["id"]
        brain_id = client.get("/api/brains").json()[0]["id"]
        put(service_with(data, KEY1), brain_id, make_archive(brain_files(2)), user=user_id)
        for _ in range(2):  # not a one-off: every download of it says the same
            answer = client.get(f"/api/brains/{brain_id}/sync")
            assert answer.status_code == 503, answer.text
            assert answer.json()["code"] == "encryption_key_unavailable"
            assert "encrypted at rest" in answer.json()["error"]
        ready = client.get("/health/ready")
        if key is None:
            assert ready.status_code == 503 and "STORE_ENCRYPTION_KEY" in ready.json()["error"], ready.text
        else:
            assert ready.status_code == 200, ready.text
        assert client.get("/health/live").status_code == 200


def test_the_crypto_free_copies_of_the_format_match_it() -> None:
    """store.sealed recognises sealed blobs without importing the crypto stack (encryption off)."""
    from store import sealed

    assert sealed.SEALED_MAGIC == sealing.MAGIC and sealed.HEADER_SIZE == sealing.HEADER_SIZE
