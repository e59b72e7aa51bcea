"""Store observability: route templates, the audit log's files, a real two-worker store whose
/metrics (token-protected) shows every listed series moving with traffic, never ids or tokens, and
a real store auditing renames, trash, members and agent keys (and which key a caller used), never a
key, nor in its error lines."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families

from store.app import create_app
from store.audit import AuditLog, audit_event, day_file, expired_files, outcome
from store.metrics import StoreMetrics, route_template, upload_outcome
from store.settings import SettingsError, StoreSettings
from store.sharing.registry import SharingRegistry
from tests.store.conftest import add_user, brain_files, make_archive, start_store
from tests.support.processes import console_script, free_port, run_server

BRAIN = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(("path", "template"), [
    ("/health", "/health"), ("/health/ready", "/health/ready"), ("/api/brains", "/api/brains"),
    (f"/api/brains/{BRAIN}", "/api/brains/{id}"), (f"/api/brains/{BRAIN}/sync", "/api/brains/{id}/sync"),
    (f"/api/brains/{BRAIN}/versions", "/api/brains/{id}/versions"),
    (f"/api/brains/{BRAIN}/versions/v1/restore", "/api/brains/{id}/versions/{name}/restore"),
    (f"/api/brains/{BRAIN}/trash", "/api/brains/{id}/trash"), (f"/api/brains/{BRAIN}/audit", "/api/brains/{id}/audit"),
    (f"/api/brains/{BRAIN}/members", "/api/brains/{id}/members"),
    (f"/api/brains/{BRAIN}/members/bob@example.org", "/api/brains/{id}/members/{user}"),
    ("/api/keys", "/api/keys"), ("/api/keys/bsk_12345678", "/api/keys/{prefix}"),
    ("/api/brains/", "other"), (f"/api/brains/{BRAIN}/secret", "other"), ("/bst_token", "other"),
    (f"/api/brains/{BRAIN}/members/", "other"), ("/api/keys/", "other"), ("/api/keys/a/b", "other"),
])
def test_route_templates_never_carry_ids(path: str, template: str) -> None:
    assert route_template(path) == template


def test_outcome_words() -> None:
    assert upload_outcome(200) == "stored" and upload_outcome(412) == "precondition_failed"
    assert upload_outcome(502) == "server_error" and upload_outcome(418) == "refused"
    assert [outcome(s) for s in (200, 304, 401, 429, 404, 500)] == ["ok", "ok", "denied", "denied", "refused", "error"]


def test_metrics_totals_add_up_across_worker_files(tmp_path: Path) -> None:
    first, second = StoreMetrics(tmp_path), StoreMetrics(tmp_path)
    second._pid += 1  # two workers of one server
    first.observe("GET", "/api/brains", 200, 0.002, 0, 10)
    second.observe("GET", "/api/brains", 200, 0.3, 0, 5)
    second.flush()
    families = _families(first.render().decode())
    assert _value(families, "brain_store_requests_total", route="/api/brains", status="200") == 2
    assert _value(families, "brain_store_response_bytes_total", route="/api/brains") == 15
    assert _value(families, "brain_store_request_duration_seconds_bucket", le="0.0025") == 1
    assert _value(families, "brain_store_request_duration_seconds_bucket", le="+Inf") == 2
    (tmp_path / "store-999.json").write_text("[[not json")  # a torn file is skipped, not fatal
    assert _value(_families(first.render().decode()), "brain_store_requests_total") == 2


def test_metrics_observe_is_cheap_and_labelled_by_template() -> None:
    metrics = StoreMetrics()
    for _ in range(3):
        metrics.observe("PUT", "/api/brains/{id}/sync", 412, 0.01, 100, 50)
    metrics.observe("GET", "/api/brains/{id}/sync", 429, 0.001, 0, 10)
    text = metrics.render().decode()
    assert 'brain_store_uploads_total{outcome="precondition_failed"} 3.0' in text
    assert 'brain_store_precondition_failed_total{route="/api/brains/{id}/sync"} 3.0' in text
    assert 'brain_store_rate_limited_total{route="/api/brains/{id}/sync"} 1.0' in text
    assert 'brain_store_request_bytes_total{route="/api/brains/{id}/sync"} 300.0' in text


def test_audit_settings() -> None:
    base = {"STORE_DATA_DIR": "/srv/brain"}
    assert StoreSettings.from_env(base).audit_dir is None
    assert StoreSettings.from_env({**base, "STORE_AUDIT_LOG": "on"}).audit_dir == Path("/srv/brain/audit")
    assert StoreSettings.from_env({**base, "STORE_AUDIT_LOG": "/var/log/brain"}).audit_dir == Path("/var/log/brain")
    with pytest.raises(SettingsError, match="STORE_AUDIT_RETENTION_DAYS"):
        StoreSettings.from_env({**base, "STORE_AUDIT_RETENTION_DAYS": "-1"})
    settings = StoreSettings.from_env({**base, "STORE_AUDIT_LOG": "on", "STORE_METRICS_TOKEN": "t0k",
                                       "STORE_METRICS": "off", "STORE_AUDIT_RETENTION_DAYS": "7"})
    again = StoreSettings.from_env(settings.to_env())
    assert (again.audit_dir, again.metrics_token, again.metrics, again.audit_retention_days) == (
        Path("/srv/brain/audit"), "t0k", False, 7)


def test_audit_log_lines_permissions_and_retention(tmp_path: Path) -> None:
    directory = tmp_path / "audit"
    today = datetime.now(UTC)
    old = [day_file(directory, (today - timedelta(days=d)).strftime("%Y-%m-%d")) for d in (10, 40)]
    directory.mkdir()
    for path in old:
        path.write_text("{}\n")
    assert expired_files(directory, today, 30) == [old[1]]
    assert expired_files(directory, today, 0) == []
    log = AuditLog(directory, retention_days=30)
    event = audit_event("PUT", "/api/brains/{id}/sync", f"/api/brains/{BRAIN}/sync", 412, "u_1")
    assert event is not None
    log.write(event)
    log.write(audit_event("POST", "/api/brains/{id}/versions/{name}/restore",
                          f"/api/brains/{BRAIN}/versions/v7/restore", 200, "u_1") or {})
    log.close()
    assert audit_event("GET", "/health", "/health", 200, None) is None
    noted = audit_event("PUT", "/api/brains/{id}/members", f"/api/brains/{BRAIN}/members", 200, "u_1",
                        {"member": "u_2", "user": "u_9", "brain": "other"})  # a note never replaces the request's
    assert noted is not None and (noted["user"], noted["brain"], noted["member"]) == ("u_1", BRAIN, "u_2")
    keyed = audit_event("GET", "/api/brains", "/api/brains", 200, "u_1", key="bsk_" + "K" * 43)
    assert keyed is not None and keyed["key"] == "bsk_" + "K" * 8  # never more of a key than its listed prefix
    current = day_file(directory, today.strftime("%Y-%m-%d"))
    lines = [json.loads(line) for line in current.read_text().splitlines()]
    assert lines[0]["action"] == "upload" and lines[0]["outcome"] == "refused" and lines[0]["brain"] == BRAIN
    assert lines[1]["action"] == "restore_version" and lines[1]["version"] == "v7"
    assert current.stat().st_mode & 0o777 == 0o600
    assert not old[1].exists() and old[0].exists()


def _families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def _value(families: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for found, v in families.get(name, []) if all(found.get(k) == x for k, x in labels.items()))


def test_two_worker_store_metrics_move_and_audit_records(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = add_user(data, "alice")
    port = free_port()
    env = {"STORE_AUDIT_LOG": "on", "STORE_METRICS_TOKEN": "metrics-secret", "STORE_RATE_FAILED_LOGINS_PER_MIN": "2",
           "STORE_METRICS_DIR": ""}
    argv = [console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", str(port), "--data", str(data),
            "--workers", "2"]
    with run_server(argv, port=port, env=env, log_path=tmp_path / "store.log") as server:
        http = httpx.Client(base_url=server.base_url, timeout=30, headers={"Authorization": f"Bearer {token}"})
        brain = http.get("/api/brains").json()[0]["id"]
        archive = make_archive(brain_files(3, "m"))
        put = http.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", archive, "application/gzip")})
        assert put.status_code == 200
        stale = http.put(f"/api/brains/{brain}/sync", headers={"If-Match": '"' + "0" * 64 + '"'},
                         files={"brain": ("b.tar.gz", archive, "application/gzip")})
        assert stale.status_code == 412
        assert http.get(f"/api/brains/{brain}/sync").content == archive
        statuses = [httpx.get(server.base_url + "/api/brains", headers={"Authorization": "Bearer bst_wrong"}).status_code
                    for _ in range(4)]
        assert 429 in statuses

        assert httpx.get(server.base_url + "/metrics").status_code == 401
        assert httpx.get(server.base_url + "/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        # Each worker publishes its totals within a second of its last request, and the kernel
        # spreads connections over both workers: poll until both have published.
        deadline = time.monotonic() + 10
        while True:
            scraped = httpx.get(server.base_url + "/metrics", headers={"Authorization": "Bearer metrics-secret"})
            assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
            text = scraped.text
            seen = _families(text)
            published = (
                _value(seen, "brain_store_uploads_total") == 2
                and _value(seen, "brain_store_rate_limited_total", route="/api/brains") >= 1
                and _value(seen, "brain_store_requests_total", method="GET", route="/api/brains/{id}/sync") == 1
            )
            if published or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert brain not in text and token not in text and "alice" not in text
        families = _families(text)
        sync = "/api/brains/{id}/sync"
        # Requests may have gone to either worker: the values are the sum over both.
        assert _value(families, "brain_store_requests_total", method="PUT", route=sync, status="200") == 1
        assert _value(families, "brain_store_requests_total", method="GET", route=sync, status="200") == 1
        assert _value(families, "brain_store_uploads_total", outcome="stored") == 1
        assert _value(families, "brain_store_uploads_total", outcome="precondition_failed") == 1
        assert _value(families, "brain_store_precondition_failed_total", route=sync) == 1
        assert _value(families, "brain_store_rate_limited_total", route="/api/brains") >= 1
        assert _value(families, "brain_store_request_bytes_total", route=sync) > 2 * len(archive)
        assert _value(families, "brain_store_response_bytes_total", route=sync) >= len(archive)
        assert _value(families, "brain_store_request_duration_seconds_count", method="PUT", route=sync) == 2

    audit_files = list((data / "audit").glob("audit-*.jsonl"))
    assert len(audit_files) == 1
    raw = audit_files[0].read_text()
    assert token not in raw and "bst_wrong" not in raw
    entries = [json.loads(line) for line in raw.splitlines()]
    uploads = [e for e in entries if e["action"] == "upload"]
    assert [(e["status"], e["outcome"], e["brain"]) for e in uploads] == [(200, "ok", brain), (412, "refused", brain)]
    assert all(e["user"] and e["client"] == "127.0.0.1" for e in uploads)
    denied = [e for e in entries if e["action"] == "list_brains" and e["outcome"] == "denied"]
    assert len(denied) == 4 and all(e["user"] is None for e in denied)


def test_audit_log_records_renames_trash_members_and_keys_never_the_key(tmp_path: Path) -> None:
    """Who shared a brain, made or revoked its keys, renamed or trashed it: a real store writes each
    in the contract's line format, with the status, the member's id and the key's prefix only."""
    data = tmp_path / "data"
    alice_token, bob_token = add_user(data, "alice"), add_user(data, "bob", "bob@example.org")
    # The request lines on stderr too (STORE_QUIET 0): a key pasted into a path is cut there as well.
    with start_store(tmp_path, env={"STORE_AUDIT_LOG": "on", "STORE_QUIET": "0"}, data=data) as store:
        alice, bob = store.client(alice_token), store.client(bob_token)
        alice_id, bob_id = (c.get("/auth/me").json()["user"]["id"] for c in (alice, bob))
        brain = alice.get("/api/brains").json()[0]["id"]
        members = f"/api/brains/{brain}/members"
        assert alice.put(members, json={"user": "bob@example.org", "role": "viewer"}).status_code == 200
        assert alice.put(members, json={"user": "bob", "role": "king"}).status_code == 400
        assert bob.get(members).status_code == 200
        assert bob.patch(f"/api/brains/{brain}", json={"name": "mine"}).status_code == 403
        assert alice.patch(f"/api/brains/{brain}", json={"name": "work"}).status_code == 200
        created = alice.post("/api/keys", json={"brains": [brain, brain], "scope": "write", "label": "ci"})
        assert created.status_code == 201
        key, prefix = created.json()["key"], created.json()["prefix"]
        assert alice.get("/api/keys").status_code == 200
        assert alice.get(f"/api/brains/{brain}/audit").status_code == 200
        assert alice.delete(f"/api/keys/{key}").status_code == 404  # the whole key, in the path by mistake
        assert alice.delete(f"/api/keys/{prefix}").status_code == 204
        assert alice.delete(f"{members}/bob@example.org").status_code == 204
        assert store.client("bst_wrong").post(f"/api/brains/{brain}/trash").status_code == 401
        assert alice.post(f"/api/brains/{brain}/trash").status_code == 204

    raw = "".join(path.read_text() for path in (data / "audit").glob("audit-*.jsonl"))
    assert key not in raw and key[len(prefix):] not in raw and alice_token not in raw and "bst_wrong" not in raw
    requests = "".join(path.read_text() for path in tmp_path.glob("store-*.log"))
    assert f'"path":"/api/keys/{prefix}\u2026"' in requests or f'"path":"/api/keys/{prefix}…"' in requests
    assert key not in requests and key[len(prefix):] not in requests
    assert "bob@example.org" not in raw and '"ci"' not in raw  # ids only: no addresses, no labels
    entries = [json.loads(line) for line in raw.splitlines()]
    assert all(e["client"] == "127.0.0.1" and e["ts"].endswith("Z") for e in entries)
    seen = [{k: v for k, v in e.items() if k not in ("ts", "client")} for e in entries
            if e["action"] not in ("whoami", "list_brains")]
    assert seen == [
        {"user": alice_id, "action": "set_member", "status": 200, "outcome": "ok", "brain": brain,
         "member": bob_id, "role": "viewer"},
        {"user": alice_id, "action": "set_member", "status": 400, "outcome": "refused", "brain": brain,
         "member": bob_id},
        {"user": bob_id, "action": "list_members", "status": 200, "outcome": "ok", "brain": brain},
        {"user": bob_id, "action": "rename_brain", "status": 403, "outcome": "denied", "brain": brain},
        {"user": alice_id, "action": "rename_brain", "status": 200, "outcome": "ok", "brain": brain},
        {"user": alice_id, "action": "create_key", "status": 201, "outcome": "ok", "brains": [brain],
         "key": prefix, "scope": "write"},
        {"user": alice_id, "action": "list_keys", "status": 200, "outcome": "ok"},
        {"user": alice_id, "action": "read_audit", "status": 200, "outcome": "ok", "brain": brain},
        {"user": alice_id, "action": "revoke_key", "status": 404, "outcome": "refused"},
        {"user": alice_id, "action": "revoke_key", "status": 204, "outcome": "ok", "key": prefix,
         "brains": [brain]},
        {"user": alice_id, "action": "remove_member", "status": 204, "outcome": "ok", "brain": brain,
         "member": bob_id},
        {"user": None, "action": "trash_brain", "status": 401, "outcome": "denied", "brain": brain},
        {"user": alice_id, "action": "trash_brain", "status": 204, "outcome": "ok", "brain": brain},
    ]


def test_audit_lines_of_an_agent_keys_requests_name_its_prefix(tmp_path: Path) -> None:
    """Every audit line, and every request line on stderr, of a request an agent key authenticated
    names the key by the 12 characters it is listed by (which key did it, never the key); its user's
    own requests and a revoked key's refused ones name none. The request lines named only the user."""
    data = tmp_path / "data"
    token = add_user(data, "alice")
    with start_store(tmp_path, env={"STORE_AUDIT_LOG": "on", "STORE_QUIET": "0"}, data=data) as store:
        alice = store.client(token)
        brain = alice.get("/api/brains").json()[0]["id"]
        created = alice.post("/api/keys", json={"brains": [brain], "scope": "write"}).json()
        key, prefix = created["key"], created["prefix"]
        keyed = store.client(key)
        archive = make_archive(brain_files(2, "k"))
        assert keyed.get("/auth/me").status_code == 200
        assert keyed.put(f"/api/brains/{brain}/sync",
                         files={"brain": ("b.tar.gz", archive, "application/gzip")}).status_code == 200
        assert keyed.get(f"/api/brains/{brain}/sync").content == archive
        assert keyed.patch(f"/api/brains/{brain}", json={"name": "mine"}).status_code == 403
        assert keyed.post("/api/keys", json={"brains": [brain], "scope": "read"}).status_code == 403
        assert alice.get(f"/api/brains/{brain}").status_code == 200
        assert alice.delete(f"/api/keys/{prefix}").status_code == 204
        assert keyed.get(f"/api/brains/{brain}").status_code == 401

    raw = "".join(path.read_text() for path in (data / "audit").glob("audit-*.jsonl"))
    assert key not in raw and key[len(prefix):] not in raw and token not in raw
    entries = [json.loads(line) for line in raw.splitlines()]
    seen = [(e["action"], e["status"], e.get("key")) for e in entries if e["action"] not in ("list_brains",)]
    assert seen == [
        ("create_key", 201, prefix),  # the key made, as before
        ("whoami", 200, prefix),
        ("upload", 200, prefix),
        ("download", 200, prefix),
        ("rename_brain", 403, prefix),
        ("create_key", 403, prefix),  # the key that tried, refused before any key was made
        ("get_brain", 200, None),
        ("revoke_key", 204, prefix),
        ("get_brain", 401, None),  # a revoked key authenticates nothing: no user, no key
    ]
    assert len(prefix) == 12 and all(e["user"] for e in entries if e.get("key"))

    written = "".join(path.read_text() for path in tmp_path.glob("store-*.log"))
    assert key not in written and key[len(prefix):] not in written and token not in written
    lines = [json.loads(line) for line in written.splitlines() if line.startswith('{"ts":')]
    alice_id = next(e["user"] for e in entries if e["action"] == "get_brain" and e["status"] == 200)
    requests = [(r["method"], r["path"].replace(brain, "B"), r["status"], r["user"], r.get("key"))
                for r in lines if r["path"].startswith(("/api/", "/auth/"))]
    assert requests == [
        ("GET", "/api/brains", 200, alice_id, None),
        ("POST", "/api/keys", 201, alice_id, None),  # alice made it: the new key is the audit line's note only
        ("GET", "/auth/me", 200, alice_id, prefix),
        ("PUT", "/api/brains/B/sync", 200, alice_id, prefix),  # answered by the front door
        ("GET", "/api/brains/B/sync", 200, alice_id, prefix),
        ("PATCH", "/api/brains/B", 403, alice_id, prefix),
        ("POST", "/api/keys", 403, alice_id, prefix),
        ("GET", "/api/brains/B", 200, alice_id, None),
        ("DELETE", f"/api/keys/{prefix}", 204, alice_id, None),
        ("GET", "/api/brains/B", 401, None, None),
    ]


def test_an_unexpected_error_on_a_key_path_logs_the_path_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """The store's error line for a request that failed unexpectedly cuts a key pasted into the
    path to its listed prefix, as the request log does (a 500 on DELETE /api/keys/<key> wrote it)."""
    data = tmp_path / "data"
    token = add_user(data, "alice")
    key = "bsk_" + "Q" * 43

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the registry broke")

    monkeypatch.setattr(SharingRegistry, "revoke_key", broken)
    app = create_app(StoreSettings.from_env({"STORE_DATA_DIR": str(data), "STORE_QUIET": "1"}))
    with TestClient(app) as client, caplog.at_level(logging.ERROR, logger="store"):
        answer = client.delete(f"/api/keys/{key}", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 500 and answer.json() == {"error": "internal error"}
    assert f"unexpected error on DELETE /api/keys/{key[:12]}\u2026" in caplog.text
    assert key not in caplog.text and key[12:] not in caplog.text
