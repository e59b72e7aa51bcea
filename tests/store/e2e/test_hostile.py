"""Hostile inputs over HTTP: each gets its specific 4xx with a JSON error, and nothing changes.

Two real store processes: one with default limits, one with a 1 MiB upload limit for the
oversize cases. After every case the seeded brain must still hold exactly its archive.
"""

from __future__ import annotations

import hashlib
import os
import socket
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from contract.conformance.archives import brain_archive, make_archive
from tests.contract.harness import running_store
from tests.store.e2e import corpus

pytestmark = pytest.mark.xdist_group("store-e2e-hostile")

MIB = 1024 * 1024


@dataclass
class Target:
    """A running store with one user whose brain holds ``archive``."""

    url: str
    token: str
    brain_id: str
    archive: bytes
    http: httpx.Client
    data_dir: Path

    def auth(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", **extra}

    def upload(self, data: bytes, **headers: str) -> httpx.Response:
        files = {"brain": ("brain.tar.gz", data, "application/gzip")}
        return self.http.put(f"/api/brains/{self.brain_id}/sync", files=files, headers=self.auth(**headers))

    def raw_put(self, body: bytes, content_type: str) -> httpx.Response:
        return self.http.put(f"/api/brains/{self.brain_id}/sync", content=body, headers=self.auth(**{"Content-Type": content_type}))

    def brain_count(self) -> int:
        return len(self.http.get("/api/brains", headers=self.auth()).json())


def _seed(url: str, token: str, data_dir: Path) -> Target:
    http = httpx.Client(base_url=url, timeout=60)
    brain_id = http.get("/api/brains", headers={"Authorization": f"Bearer {token}"}).json()[0]["id"]
    archive = brain_archive("hostile-seed", 7)
    target = Target(url, token, brain_id, archive, http, data_dir)
    resp = target.upload(archive)
    assert resp.status_code == 200, resp.text
    return target


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with running_store(tmp_path_factory.mktemp("hostile") / "data", env={"STORE_RATE_LIMITS": "off"}) as store:
        seeded = _seed(store.url, store.add_user("mallory"), store.data_dir)
        yield seeded
        seeded.http.close()


@pytest.fixture(scope="module")
def small_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    env = {"STORE_RATE_LIMITS": "off", "STORE_MAX_UPLOAD_MB": "1"}
    with running_store(tmp_path_factory.mktemp("hostile-small") / "data", env=env) as store:
        seeded = _seed(store.url, store.add_user("mallory"), store.data_dir)
        yield seeded
        seeded.http.close()


def assert_unchanged(t: Target) -> None:
    """The seeded brain still holds exactly its archive: bytes, headers and record."""
    resp = t.http.get(f"/api/brains/{t.brain_id}/sync", headers=t.auth())
    checksum = hashlib.sha256(t.archive).hexdigest()
    assert resp.status_code == 200
    assert resp.content == t.archive
    assert hashlib.sha256(resp.content).hexdigest() == checksum
    assert resp.headers["etag"] == f'"{checksum}"' and resp.headers["x-checksum"] == checksum
    record = t.http.get(f"/api/brains/{t.brain_id}", headers=t.auth()).json()
    assert (record["checksum"], record["size_bytes"], record["file_count"]) == (checksum, len(t.archive), 7)


def assert_json_error(resp: httpx.Response, status: int) -> None:
    assert resp.status_code == status, f"expected {status}, got {resp.status_code}: {resp.text[:300]}"
    body = resp.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body


# --- archives that must be refused with 400 -------------------------------------------------

@lru_cache(maxsize=None)
def _many_entries() -> bytes:
    return corpus.many_entries(600_000)


ARCHIVES: dict[str, Callable[[], bytes]] = {
    "traversal-dotdot": lambda: corpus.tgz_with_entry("../evil.md"),
    "traversal-nested": lambda: corpus.tgz_with_entry("memory/../../evil.md"),
    "traversal-absolute": lambda: corpus.tgz_with_entry("/etc/cron.d/evil"),
    "symlink-out": lambda: corpus.tgz_with_special(tarfile.SYMTYPE, linkname="/etc/passwd"),
    "symlink-write-through": corpus.tgz_symlink_then_write_through,
    "hard-link": lambda: corpus.tgz_with_special(tarfile.LNKTYPE, linkname="memory/a.md"),
    "hard-link-outside": lambda: corpus.tgz_with_special(tarfile.LNKTYPE, linkname="/etc/shadow"),
    "char-device": lambda: corpus.tgz_with_special(tarfile.CHRTYPE, devmajor=1, devminor=3),
    "block-device": lambda: corpus.tgz_with_special(tarfile.BLKTYPE, devmajor=8, devminor=0),
    "fifo": lambda: corpus.tgz_with_special(tarfile.FIFOTYPE),
    "huge-pax-header": lambda: corpus.huge_pax_header(2 * MIB),
    "huge-gnu-longname": lambda: corpus.huge_gnu_longname(2 * MIB),
    "truncated-gzip": corpus.truncated_gzip,
    "truncated-tar": corpus.truncated_tar,
    "tar-without-end-marker": corpus.tar_without_end_marker,
    "empty-gzip": corpus.empty_gzip,
    "empty-body": lambda: b"",
    "junk-after-gzip": corpus.junk_after_gzip,
    "junk-after-tar-end": corpus.junk_after_tar_end,
    "plain-tar-not-gzip": corpus.plain_tar,
    "not-gzip-text": lambda: b"#!/bin/sh\necho definitely not an archive\n",
    "gzip-bad-crc": corpus.bad_gzip_crc,
    "gzip-not-tar": corpus.gzip_of_text,
    "pax-duplicate-path": corpus.duplicate_pax_path,
    "pax-duplicate-size": corpus.duplicate_pax_size,
    "pax-size-of-many-digits": corpus.pax_size_of_many_digits,  # int() raised ValueError: a 500
    "control-character-name": corpus.control_character_name,
}
SLOW_ARCHIVES: dict[str, Callable[[], bytes]] = {
    "gzip-bomb-1.1GiB": lambda: corpus.gzip_bomb(1100 * MIB),
    "600000-entries": _many_entries,
}


@pytest.mark.parametrize("name", sorted(ARCHIVES))
def test_hostile_archive_is_refused(target: Target, name: str) -> None:
    assert_json_error(target.upload(ARCHIVES[name]()), 400)
    assert_unchanged(target)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW_ARCHIVES))
def test_expensive_archive_is_refused(target: Target, name: str) -> None:
    assert_json_error(target.upload(SLOW_ARCHIVES[name]()), 400)
    assert_unchanged(target)


def test_archive_inflating_like_no_brain_is_refused(target: Target) -> None:
    """~250 KiB of gzip inflating to 250 MiB of zeros (~1000x; real brains: 12-35x): a clear 400, quickly."""
    bomb = corpus.gzip_bomb(250 * MIB)
    assert len(bomb) < 300 * 1024
    started = time.monotonic()
    resp = target.upload(bomb)
    assert_json_error(resp, 400)
    assert "200 times its compressed size" in resp.json()["error"]
    assert time.monotonic() - started < 10
    assert_unchanged(target)


# --- malformed requests ----------------------------------------------------------------------

def test_multipart_without_boundary(target: Target) -> None:
    body = corpus.multipart([("brain", "brain.tar.gz", corpus.valid_small("nb"))])
    assert_json_error(target.raw_put(body, "multipart/form-data"), 400)
    assert_unchanged(target)


def test_multipart_with_wrong_boundary(target: Target) -> None:
    body = corpus.multipart([("brain", "brain.tar.gz", corpus.valid_small("wb"))])
    assert_json_error(target.raw_put(body, "multipart/form-data; boundary=not-the-one-used"), 400)
    assert_unchanged(target)


def test_multipart_without_brain_field(target: Target) -> None:
    body = corpus.multipart([("archive", "brain.tar.gz", corpus.valid_small("nf"))])
    assert_json_error(target.raw_put(body, "multipart/form-data; boundary=hostile-boundary-7f3a"), 400)
    assert_unchanged(target)


def test_multipart_filename_brain_is_not_the_field(target: Target) -> None:
    body = corpus.multipart([("file", "brain", corpus.valid_small("fn"))])
    assert_json_error(target.raw_put(body, "multipart/form-data; boundary=hostile-boundary-7f3a"), 400)
    assert_unchanged(target)


def test_multipart_with_two_brain_fields(target: Target) -> None:
    body = corpus.multipart([("brain", "a.tar.gz", corpus.valid_small("one")), ("brain", "b.tar.gz", corpus.valid_small("two"))])
    assert_json_error(target.raw_put(body, "multipart/form-data; boundary=hostile-boundary-7f3a"), 400)
    assert_unchanged(target)


def test_multipart_truncated(target: Target) -> None:
    body = corpus.multipart([("brain", "brain.tar.gz", corpus.valid_small("tr"))])
    assert_json_error(target.raw_put(body[: len(body) - 30], "multipart/form-data; boundary=hostile-boundary-7f3a"), 400)
    assert_unchanged(target)


def test_body_not_multipart(target: Target) -> None:
    assert_json_error(target.raw_put(corpus.valid_small("raw"), "application/gzip"), 400)
    assert_unchanged(target)


def _incompressible_archive(size: int) -> bytes:
    return make_archive({"memory/noise.bin": os.urandom(size)})


def test_oversize_with_content_length(small_target: Target) -> None:
    resp = small_target.upload(_incompressible_archive(3 * MIB))
    assert_json_error(resp, 413)
    assert_unchanged(small_target)


def test_oversize_chunked_without_content_length(small_target: Target) -> None:
    body = corpus.multipart([("brain", "brain.tar.gz", _incompressible_archive(3 * MIB))])

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    headers = small_target.auth(**{"Content-Type": "multipart/form-data; boundary=hostile-boundary-7f3a"})
    resp = small_target.http.put(f"/api/brains/{small_target.brain_id}/sync", content=chunks(), headers=headers)
    assert "content-length" not in {k.lower() for k in resp.request.headers}
    assert_json_error(resp, 413)
    assert_unchanged(small_target)


def test_under_the_limit_still_accepted(small_target: Target) -> None:
    """Control case: the small server takes an archive just under its limit (then restores the seed)."""
    archive = _incompressible_archive(900 * 1024)
    assert small_target.upload(archive).status_code == 200
    assert small_target.upload(small_target.archive).status_code == 200
    assert_unchanged(small_target)


@pytest.mark.parametrize("bad", ["not-a-uuid", "1234", "00000000-0000-0000-0000-00000000000g", "%2e%2e", "%ff%fe%fd", "x" * 500])
def test_bad_brain_ids(target: Target, bad: str) -> None:
    for method, path in (("GET", f"/api/brains/{bad}"), ("GET", f"/api/brains/{bad}/sync"), ("GET", f"/api/brains/{bad}/versions"), ("DELETE", f"/api/brains/{bad}")):
        assert_json_error(target.http.request(method, path, headers=target.auth()), 404)
    resp = target.http.put(f"/api/brains/{bad}/sync", files={"brain": ("b", corpus.valid_small("id"), "application/gzip")}, headers=target.auth())
    assert_json_error(resp, 404)
    assert_unchanged(target)


@pytest.mark.parametrize("path", ["/api/brains/%zz", "/api/brains/%E0%A4%A/sync", "/api/brains/abc%/versions"])
def test_bad_percent_escapes_in_path(target: Target, path: str) -> None:
    assert_json_error(target.http.get(path, headers=target.auth()), 400)
    assert_unchanged(target)


def test_bad_percent_escape_in_version_query(target: Target) -> None:
    resp = target.http.get(f"/api/brains/{target.brain_id}/sync?version=%zz%2", headers=target.auth())
    assert_json_error(resp, 400)
    assert_unchanged(target)


@pytest.mark.parametrize("version", ["../meta.json", "..%2F..%2Fusers.json", "..%2F..%2F..%2Fusers.json", "%2E%2E%2Fmeta.json", "blobs%2F..%2Fmeta.json", "/etc/passwd"])
def test_traversal_version_names(target: Target, version: str) -> None:
    resp = target.http.get(f"/api/brains/{target.brain_id}/sync?version={version}", headers=target.auth())
    assert resp.status_code in (400, 404)
    assert_json_error(resp, resp.status_code)
    resp = target.http.post(f"/api/brains/{target.brain_id}/versions/{version.replace('/', '%2F')}/restore", headers=target.auth())
    assert resp.status_code in (400, 404)
    assert_json_error(resp, resp.status_code)
    assert_unchanged(target)


@pytest.mark.parametrize("tag", ['W/"{c}"', 'w/"{c}"', "{c}", '"{c}', '""', "W/*", '"{c}x"'])
def test_weak_or_malformed_if_match_never_matches(target: Target, tag: str) -> None:
    value = tag.format(c=hashlib.sha256(target.archive).hexdigest())
    resp = target.upload(corpus.valid_small("weak"), **{"If-Match": value})
    assert_json_error(resp, 412)
    assert resp.json()["current_checksum"] == hashlib.sha256(target.archive).hexdigest()
    assert_unchanged(target)


@pytest.mark.parametrize("size", [1_000, 8_000])
def test_overlong_tokens(target: Target, size: int) -> None:
    resp = target.http.get("/api/brains", headers={"Authorization": "Bearer bst_" + "A" * size})
    assert_json_error(resp, 401)
    assert resp.headers["www-authenticate"].lower().startswith("bearer")
    resp = target.upload(corpus.valid_small("tok"), Authorization="Bearer " + "b" * size)
    assert_json_error(resp, 401)
    assert_unchanged(target)


def test_token_with_control_and_non_ascii_bytes(target: Target) -> None:
    for raw in (b"Bearer bst_\xff\xfeabc", b"Bearer \xc3\xa9t\xc3\xa9", b"Bearer bst_\tabc"):
        resp = target.http.get("/api/brains", headers=[(b"Authorization", raw)])
        assert_json_error(resp, 401)
    assert_unchanged(target)


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[]", b'"default"', b'{"name": 123}', b'{"name": ""}', b'{"name": null, "x": [}', b"\xff\xfe", b'{"name": "' + b"n" * 10_000 + b'"}'],
    ids=["broken", "array", "string", "name-number", "name-empty", "broken-tail", "not-utf8", "name-10k"],
)
def test_bad_json_when_creating_a_brain(target: Target, body: bytes) -> None:
    before = target.brain_count()
    resp = target.http.post("/api/brains", content=body, headers=target.auth(**{"Content-Type": "application/json"}))
    assert_json_error(resp, 400)
    assert target.brain_count() == before
    assert_unchanged(target)


# --- floods: refused with 429 + Retry-After, nothing changed ---------------------------------

@pytest.fixture(scope="module")
def limited_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    env = {"STORE_RATE_UPLOADS_PER_MIN": "3", "STORE_RATE_FAILED_LOGINS_PER_MIN": "5", "STORE_RATE_REQUESTS_PER_MIN": "100000"}
    with running_store(tmp_path_factory.mktemp("hostile-limited") / "data", env=env) as store:
        seeded = _seed(store.url, store.add_user("flooder"), store.data_dir)
        yield seeded
        seeded.http.close()


def test_upload_flood_gets_429_with_retry_after(limited_target: Target) -> None:
    live = limited_target.archive
    statuses = []
    for i in range(8):
        archive = corpus.valid_small(f"flood{i}")
        resp = limited_target.upload(archive)
        statuses.append(resp.status_code)
        if resp.status_code == 200:
            live = archive
    assert 429 in statuses, statuses
    refused = limited_target.upload(corpus.valid_small("flood-last"))
    assert_json_error(refused, 429)
    assert int(refused.headers["retry-after"]) >= 1
    assert statuses.count(200) <= 3, statuses  # the seed used one of the per-minute budget
    # Downloads are not upload-limited: the refused uploads changed nothing. (429 only if the
    # failed-login test already blocked this address.)
    resp = limited_target.http.get(f"/api/brains/{limited_target.brain_id}/sync", headers=limited_target.auth())
    if resp.status_code != 429:
        assert resp.status_code == 200 and resp.content == live


def test_failed_login_flood_blocks_the_address(limited_target: Target) -> None:
    statuses = [limited_target.http.get("/auth/me", headers={"Authorization": f"Bearer bst_{'Z' * 43}"}).status_code for _ in range(12)]
    assert statuses[0] == 401 and 429 in statuses, statuses
    blocked = limited_target.http.get("/auth/me", headers={"Authorization": f"Bearer bst_{'Y' * 43}"})
    assert_json_error(blocked, 429)
    assert int(blocked.headers["retry-after"]) >= 1
    # Blocked before any credential work: even the right token waits.
    assert_json_error(limited_target.http.get("/auth/me", headers=limited_target.auth()), 429)


# --- a client that vanishes mid-upload -------------------------------------------------------

def test_client_disconnect_mid_upload_changes_nothing(target: Target) -> None:
    """Declare 2 MB, send 300 KB of a valid-looking upload, close the socket: nothing changes."""
    body = corpus.multipart([("brain", "brain.tar.gz", _incompressible_archive(2 * MIB))])
    parts = urlsplit(target.url)
    head = (
        f"PUT /api/brains/{target.brain_id}/sync HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Authorization: Bearer {target.token}\r\n"
        "Content-Type: multipart/form-data; boundary=hostile-boundary-7f3a\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head + body[: 300 * 1024])
        time.sleep(0.3)
    assert_unchanged(target)
    # The partial upload's temporary file goes away once the server notices the disconnect.
    tmp = target.data_dir / "tmp"
    deadline = time.monotonic() + 15
    while tmp.exists() and list(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not tmp.exists() or list(tmp.iterdir()) == []
    assert_unchanged(target)
