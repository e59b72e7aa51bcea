"""Client registration (RFC 7591) and Client ID Metadata Documents fetched over loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector.oauth.clients import (
    CIMD_MAX_BYTES,
    ClientRegistry,
    MetadataDocumentFetcher,
    RegistrationRefused,
    validate_registration,
)
from connector.oauth.redirects import redirect_uri_problem
from connector.oauth.server import JsonReply, PageReply
from common.docstore import DirectoryStore
from connector.oauth.client_files import ClientDocs
from connector.state.memory import MemoryStore
from tests.support.loopback import Answer, LoopbackServer

from .conftest import BASE, REDIRECT, Flow, World, query_of

GOOD_URIS = [
    "https://claude.ai/api/mcp/auth_callback",
    "https://chatgpt.com/connector_platform_oauth_redirect",
    "http://127.0.0.1:33418/callback",
    "http://localhost:6274/oauth/callback",
    "http://[::1]:8080/cb",
    "https://example.com/cb?client=1",
]
BAD_URIS = [
    "http://example.com/callback",  # http off loopback
    "http://10.0.0.1/callback",
    "ftp://example.com/cb",
    "javascript:alert(1)",
    "/relative/callback",
    "https://example.com/cb#frag",
    "https://user:pw@example.com/cb",
    "https:///nohost",
    "https://exa mple.com/cb",
    "",
    "custom-scheme://cb",
]


@pytest.mark.parametrize("uri", GOOD_URIS)
def test_acceptable_redirect_uris(uri: str) -> None:
    assert redirect_uri_problem(uri) is None


@pytest.mark.parametrize("uri", BAD_URIS)
def test_refused_redirect_uris(uri: str) -> None:
    assert redirect_uri_problem(uri) is not None


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"redirect_uris": []},
        {"redirect_uris": "https://a.example/cb"},
        {"redirect_uris": ["http://evil.example/cb"]},
        {"redirect_uris": ["https://a.example/cb"], "grant_types": ["client_credentials"]},
        {"redirect_uris": ["https://a.example/cb"], "response_types": ["token"]},
        {"redirect_uris": ["https://a.example/cb"], "client_name": "x" * 201},
        {"redirect_uris": ["https://a.example/cb"] * 21},
        ["https://a.example/cb"],
    ],
)
def test_bad_registrations_refused(body: object) -> None:
    with pytest.raises(RegistrationRefused):
        validate_registration(body)


def test_registration_answers_public_client_and_keeps_uris_exactly(world: World) -> None:
    reply = world.server.register({"redirect_uris": ["http://127.0.0.1:5000"], "client_name": "Cli",
                                   "token_endpoint_auth_method": "client_secret_post"})
    assert reply.status == 201
    body = reply.body
    assert body["client_id"].startswith("bcc_") and "client_secret" not in body
    assert body["token_endpoint_auth_method"] == "none"
    assert body["redirect_uris"] == ["http://127.0.0.1:5000"]  # not normalised with a trailing slash
    assert body["grant_types"] == ["authorization_code", "refresh_token"]
    refused = world.server.register({"redirect_uris": ["http://evil.example/cb"]})
    assert refused.status == 400 and refused.body["error"] == "invalid_redirect_uri"


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["\u200b\u200b\u200b", "\u2060\ufeff", " \u00a0\u3000 "])
async def test_a_name_nobody_can_see_is_no_name(world: World, name: str) -> None:
    # The sign-in page read "<nothing> asks to use your brain": the client id is shown as its name instead.
    reply = world.server.register({"redirect_uris": [REDIRECT], "client_name": name})
    assert reply.status == 201 and "client_name" not in reply.body
    page = await world.server.authorize(Flow(reply.body["client_id"]).authorize_params(), BASE)
    assert isinstance(page, PageReply) and page.view.client_name == reply.body["client_id"]


def test_an_invisible_name_kept_by_an_earlier_registration_shows_the_client_id(tmp_path: Path) -> None:
    # Registrations are kept: one made before invisible names were refused still holds its name.
    registry = _registry(tmp_path, [1_900_000_000.0])
    client_id = registry.register({"redirect_uris": ["https://a.example/cb"], "client_name": "Named"})["client_id"]
    docs = ClientDocs(DirectoryStore(tmp_path))
    record = docs.get(client_id)
    assert record is not None
    docs.put(client_id, {**record, "client_name": "\u200b\u2060"})
    kept = registry.get(client_id)
    assert kept is not None and kept.display_name() == client_id


def test_registry_is_bounded(tmp_path: Path) -> None:
    registry = ClientRegistry(ClientDocs(MemoryStore()), max_clients=2)
    from connector.oauth.clients import RegistryFull

    registry.register({"redirect_uris": ["https://a.example/cb"]})
    registry.register({"redirect_uris": ["https://a.example/cb"]})
    with pytest.raises(RegistryFull):
        registry.register({"redirect_uris": ["https://a.example/cb"]})


def test_full_registry_is_503(world: World) -> None:
    world.server.clients._max = 0  # type: ignore[attr-defined]
    reply = world.server.register({"redirect_uris": ["https://a.example/cb"]})
    assert reply.status == 503 and reply.body["error"] == "temporarily_unavailable"


# -- Client ID Metadata Documents ---------------------------------------------


class _DocumentServer(LoopbackServer):
    """A loopback HTTP server answering with documents set per path."""

    def __init__(self) -> None:
        self.documents: dict[str, tuple[int, bytes]] = {}
        self.hits = 0
        super().__init__(self._answer, poll_interval=0.02)

    def _answer(self, path: str) -> Answer:
        self.hits += 1
        status, body = self.documents.get(path, (404, b"{}"))
        return status, "application/json", body

    def put(self, path: str, document: object, status: int = 200) -> str:
        raw = document if isinstance(document, bytes) else json.dumps(document).encode()
        self.documents[path] = (status, raw)
        return self.base + path


@pytest.fixture
def docs() -> Iterator[_DocumentServer]:
    server = _DocumentServer()
    yield server
    server.close()


@pytest.mark.anyio
async def test_metadata_document_client_signs_in(world: World, docs: _DocumentServer) -> None:
    client_id = docs.base + "/client.json"
    docs.put("/client.json", {"client_id": client_id, "client_name": "Doc Client",
                              "redirect_uris": ["http://127.0.0.1:33418/callback"]})
    from .conftest import Flow

    flow = Flow(client_id)
    reply = await world.server.authorize(flow.authorize_params(), BASE)
    assert isinstance(reply, PageReply) and reply.view.client_name == "Doc Client"
    # Cached: a second authorize does not fetch again.
    await world.server.authorize(flow.authorize_params(), BASE)
    assert docs.hits == 1
    bad = await world.server.authorize(flow.authorize_params(redirect_uri="http://127.0.0.1:1/other"), BASE)
    assert isinstance(bad, JsonReply) and bad.status == 400


@pytest.mark.anyio
@pytest.mark.parametrize(
    "document",
    [
        "wrong-client-id",
        "no-redirects",
        "bad-redirect",
        "secret-method",
        "not-json",
        "too-big",
        "status-500",
    ],
)
async def test_unusable_metadata_documents_are_unknown_clients(world: World, docs: _DocumentServer, document: str) -> None:
    client_id = docs.base + "/c/" + document
    body: object = {"client_id": client_id, "redirect_uris": ["http://127.0.0.1:33418/callback"]}
    status = 200
    if document == "wrong-client-id":
        body = {"client_id": docs.base + "/elsewhere", "redirect_uris": ["http://127.0.0.1:33418/callback"]}
    elif document == "no-redirects":
        body = {"client_id": client_id}
    elif document == "bad-redirect":
        body = {"client_id": client_id, "redirect_uris": ["http://evil.example/cb"]}
    elif document == "secret-method":
        body = {**body, "token_endpoint_auth_method": "client_secret_basic"}  # type: ignore[dict-item]
    elif document == "not-json":
        body = b"<html>"
    elif document == "too-big":
        body = {**body, "padding": "x" * (CIMD_MAX_BYTES + 10)}  # type: ignore[dict-item]
    elif document == "status-500":
        status = 500
    docs.put("/c/" + document, body, status)
    from .conftest import Flow

    reply = await world.server.authorize(Flow(client_id).authorize_params(), BASE)
    assert isinstance(reply, JsonReply) and reply.status == 400


@pytest.mark.anyio
async def test_metadata_document_urls_that_are_never_fetched(docs: _DocumentServer) -> None:
    strict = MetadataDocumentFetcher()
    assert strict.url_problem(docs.base + "/client.json") is not None  # http only in tests
    assert strict.url_problem("https://127.0.0.1/client.json") is not None  # internal address
    assert strict.url_problem("https://10.1.2.3/client.json") is not None
    assert strict.url_problem("https://localhost/client.json") is not None
    assert strict.url_problem("https://client.example") is not None  # no path
    assert strict.url_problem("https://client.example/oauth/metadata.json") is None
    assert await strict.fetch(docs.base + "/client.json") is None
    assert docs.hits == 0


@pytest.mark.anyio
async def test_redirect_error_goes_to_metadata_document_redirect(world: World, docs: _DocumentServer) -> None:
    client_id = docs.base + "/client.json"
    docs.put("/client.json", {"client_id": client_id, "redirect_uris": ["http://127.0.0.1:33418/callback"]})
    from .conftest import Flow

    reply = await world.server.authorize(Flow(client_id).authorize_params(resource="x"), BASE)
    assert query_of(reply.location)["error"] == "invalid_target"  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_names_resolving_to_internal_addresses_are_not_fetched() -> None:
    strict = MetadataDocumentFetcher()
    assert await strict._resolves_publicly("https://localhost/client.json") is False  # type: ignore[attr-defined]
    assert await strict._resolves_publicly("https://name.invalid/client.json") is False  # type: ignore[attr-defined]


# -- clients on disk: one file each, unused ones expire --------------------------


def _registry(tmp_path: Path, now: list[float], **kwargs) -> ClientRegistry:  # type: ignore[no-untyped-def]
    return ClientRegistry(ClientDocs(DirectoryStore(tmp_path)), clock=lambda: now[0], **kwargs)


def test_a_registration_writes_one_small_file_and_touches_no_other(tmp_path: Path) -> None:
    now = [1_900_000_000.0]
    registry = _registry(tmp_path, now)
    first = registry.register({"redirect_uris": ["https://a.example/cb"], "client_name": "First"})["client_id"]
    [path] = list((tmp_path / "clients").glob("*/bcc_*.json"))
    before = (path.stat().st_ino, path.stat().st_mtime_ns)
    for _ in range(50):
        registry.register({"redirect_uris": ["https://a.example/cb"]})
    files = list((tmp_path / "clients").glob("*/bcc_*.json"))
    assert len(files) == 51 and len(registry._clients) == 51  # type: ignore[attr-defined]
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == before
    assert all(file.stat().st_mode & 0o777 == 0o600 and file.stat().st_size < 1024 for file in files)
    assert registry.get(first) is not None and registry.get(first).client_name == "First"  # type: ignore[union-attr]
    # Another process on the same directory (a replica, or a restart) sees them all.
    assert len(ClientDocs(DirectoryStore(tmp_path))) == 51


def test_a_registration_keeps_only_the_scopes_this_server_grants(tmp_path: Path) -> None:
    # The scope member was kept as sent: 60 KB per registration (3 GB for a full registry), and
    # the response promised scopes /authorize refuses. Unknown ones are dropped (RFC 7591 3.2.1).
    registry = _registry(tmp_path, [1_900_000_000.0])
    answer = registry.register({"redirect_uris": ["https://a.example/cb"],
                                "scope": "brain.write admin brain.read brain.write " + "x" * 60_000})
    assert answer["scope"] == "brain.read brain.write"
    assert "scope" not in registry.register({"redirect_uris": ["https://a.example/cb"], "scope": "openid admin"})
    assert all(file.stat().st_size < 1024 for file in (tmp_path / "clients").glob("*/bcc_*.json"))


@pytest.mark.parametrize("client_id", ["../clients", "bcc_../../state.key", "bcc_/etc/passwd", "bcc_", "x" * 300, "bcc_a\x00b"])
def test_client_ids_that_are_not_ours_never_reach_the_disk(tmp_path: Path, client_id: str) -> None:
    registry = _registry(tmp_path, [0.0])
    assert registry.get(client_id) is None and not registry.is_unused(client_id)
    registry.mark_used(client_id)
    assert list(tmp_path.iterdir()) == []


def test_a_registration_never_used_expires_and_a_used_one_stays(tmp_path: Path) -> None:
    now = [1_900_000_000.0]
    registry = _registry(tmp_path, now, unused_ttl_s=3600)
    unused = registry.register({"redirect_uris": ["https://a.example/cb"]})["client_id"]
    used = registry.register({"redirect_uris": ["https://a.example/cb"]})["client_id"]
    assert registry.is_unused(used)
    registry.mark_used(used)
    assert not registry.is_unused(used)
    now[0] += 3599
    assert registry.get(unused) is not None
    now[0] += 2
    assert registry.get(unused) is None and registry.get(used) is not None
    assert registry.sweep() == 1
    assert len(list((tmp_path / "clients").glob("*/bcc_*.json"))) == 1


def test_a_full_registry_makes_room_from_expired_registrations(tmp_path: Path) -> None:
    from connector.oauth.clients import RegistryFull

    now = [1_900_000_000.0]
    registry = _registry(tmp_path, now, max_clients=3, unused_ttl_s=600)
    for _ in range(3):
        registry.register({"redirect_uris": ["https://a.example/cb"]})
    with pytest.raises(RegistryFull):
        registry.register({"redirect_uris": ["https://a.example/cb"]})
    now[0] += 601
    assert registry.register({"redirect_uris": ["https://a.example/cb"]})["client_id"]
    assert len(list((tmp_path / "clients").glob("*/bcc_*.json"))) == 1


def test_clients_json_of_an_older_version_is_moved_on_start(tmp_path: Path) -> None:
    import secrets as _secrets

    from connector.oauth.state import OAuthState

    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    old = {"bcc_" + "o" * 32: {"redirect_uris": ["https://old.example/cb"], "client_name": "Old", "issued_at": 1}}
    (state_dir / "clients.json").write_text(json.dumps(old))
    state = OAuthState(state_dir, _secrets.token_bytes(32))
    registry = ClientRegistry(state.clients, unused_ttl_s=60)
    record = registry.get("bcc_" + "o" * 32)
    assert record is not None and record.redirect_uris == ("https://old.example/cb",)  # no "used" flag: kept
    assert not (state_dir / "clients.json").exists() and (state_dir / "clients.json.migrated").exists()


def test_redirect_uris_are_bounded_together() -> None:
    long_uris = [f"https://a.example/{n}/" + "x" * 1900 for n in range(5)]
    with pytest.raises(RegistrationRefused):
        validate_registration({"redirect_uris": long_uris})
    assert validate_registration({"redirect_uris": long_uris[:4]})


def test_temporary_files_a_crash_left_behind_are_removed_at_start(tmp_path: Path) -> None:
    import os

    from connector.oauth.state import OAuthState

    registry = _registry(tmp_path, [1_900_000_000.0])
    registry.register({"redirect_uris": ["https://a.example/cb"]})
    [shard] = [path for path in (tmp_path / "clients").iterdir() if path.is_dir()]
    old, fresh = shard / ".x.json.old.tmp", shard / ".x.json.fresh.tmp"
    top = tmp_path / ".families.json.0123.tmp"
    for leftover in (old, fresh, top):
        leftover.write_text("{")
    os.utime(old, (0, 0)), os.utime(top, (0, 0))
    (tmp_path / ".families.json.lock").write_text("")  # a lock file is never a leftover
    state = OAuthState(tmp_path, b"k" * 32)
    assert len(state.clients) == 1 and not old.exists() and not top.exists()
    assert fresh.exists() and (tmp_path / ".families.json.lock").exists()  # a fresh one may be a replica's write
