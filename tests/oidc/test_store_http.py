"""A real `brain-store serve` process configured with the real test issuer (loopback http).

Every request goes over HTTP, exactly as a client's would; users are managed with the
real `brain-store user` commands.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.oidc import user_id_for
from tests.contract.harness import Store, running_store
from tests.oidc.attacks import ATTACKS, JUNK
from tests.support.oidc_issuer import IssuerClient, start_issuer
from tests.support.processes import REPO_ROOT, console_script

pytestmark = pytest.mark.timeout(120)

DOMAIN = "corp.example"


def oidc_env(issuer: IssuerClient, **extra: str) -> dict[str, str]:
    """Store settings that trust ``issuer`` for its audience, admitting one e-mail domain."""
    return {
        "STORE_OIDC_ISSUER": issuer.issuer,
        "STORE_OIDC_AUDIENCE": issuer.audience,
        "STORE_OIDC_ALLOWED_DOMAINS": DOMAIN,
        "STORE_RATE_FAILED_LOGINS_PER_MIN": "100000",
        **extra,
    }


def minter(issuer: IssuerClient) -> Any:
    """``issuer.mint`` adding a verified e-mail in the allowed domain, unless told otherwise."""

    def mint(alg: str = "RS256", **claims: Any) -> str:
        subject = claims.get("sub") or "nobody"
        defaults = {"email": f"{str(subject)[:40]}@{DOMAIN}", "email_verified": True}
        return issuer.mint(alg, **{**defaults, **claims})

    return mint


_HTTP = httpx.Client(timeout=30)  # one client: creating one per request is slow on a busy machine


def get(store: Store, path: str, token: str) -> httpx.Response:
    """GET with a bearer token."""
    return _HTTP.get(store.url + path, headers={"Authorization": f"Bearer {token}"})


def users(store: Store) -> list[dict[str, Any]]:
    """The users file as the store wrote it."""
    path = store.data_dir / "users.json"
    return list(json.loads(path.read_text())["users"]) if path.exists() else []


def cli(store: Store, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a `brain-store` command against the store's data directory."""
    done = subprocess.run([console_script("brain-store"), *args, "--data", str(store.data_dir)], capture_output=True,
                          text=True, cwd=REPO_ROOT, env=store.env, timeout=60)
    return done


@pytest.fixture(scope="module")
def store(issuer_process: IssuerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One OIDC-enabled store for the module (tests use distinct subjects)."""
    with running_store(tmp_path_factory.mktemp("oidc-store") / "data", env=oidc_env(issuer_process)) as running:
        yield running


# -- accepted ---------------------------------------------------------------------------------------


def test_health_advertises_oidc(store: Store) -> None:
    assert "oidc" in httpx.get(store.url + "/health").json()["capabilities"]


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_valid_token_creates_user_with_default_brain(store: Store, issuer: IssuerClient, alg: str) -> None:
    subject = f"valid-{alg}"
    token = minter(issuer)(alg, sub=subject, email=f"Valid.{alg}@Corp.Example")
    me = get(store, "/auth/me", token)
    assert me.status_code == 200, me.text
    assert me.json()["user"]["id"] == user_id_for(issuer.issuer, subject)
    assert me.json()["user"]["email"] == f"valid.{alg}@corp.example".lower()
    brains = get(store, "/api/brains", token).json()
    assert [b["name"] for b in brains] == ["default"]
    # A second sight (and a fresh token) neither duplicates the user nor the brain.
    assert get(store, "/api/brains", minter(issuer)(alg, sub=subject)).json() == brains
    assert sum(1 for u in users(store) if u["id"] == user_id_for(issuer.issuer, subject)) == 1


# -- refused --------------------------------------------------------------------------------------------


def assert_refused(store: Store, token: str) -> None:
    """401 with a Bearer challenge, and no new user."""
    before = users(store)
    response = get(store, "/auth/me", token)
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json().get("error")
    assert users(store) == before


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attacks_are_refused_and_create_nobody(store: Store, issuer: IssuerClient, name: str) -> None:
    assert_refused(store, ATTACKS[name](issuer, minter(issuer)))


@pytest.mark.parametrize("junk", JUNK)
def test_junk_is_refused(store: Store, issuer: IssuerClient, junk: str) -> None:
    assert_refused(store, junk)
    assert issuer.total_requests() == 0  # refused before any work involving the issuer


@pytest.mark.parametrize(
    "claims",
    [
        {"email": f"unverified@{DOMAIN}", "email_verified": False},
        {"email": f"unverified@{DOMAIN}", "email_verified": None},
        {"email": "someone@elsewhere.example", "email_verified": True},
        {"email": None, "email_verified": None},
        {"email": None, "hd": "elsewhere.example"},
    ],
)
def test_allow_list_refusals(store: Store, issuer: IssuerClient, claims: dict[str, Any]) -> None:
    assert_refused(store, issuer.mint(sub="outsider", **claims))


def test_hosted_domain_and_string_true_are_admitted(store: Store, issuer: IssuerClient) -> None:
    assert get(store, "/auth/me", issuer.mint(sub="hd-user", email=None, hd=DOMAIN)).status_code == 200
    token = issuer.mint(sub="string-true", email=f"st@{DOMAIN}", email_verified="true")
    assert get(store, "/auth/me", token).status_code == 200


def test_two_oidc_users_never_see_each_others_brains(store: Store, issuer: IssuerClient) -> None:
    mint = minter(issuer)
    alice, bob = mint(sub="iso-alice"), mint("ES256", sub="iso-bob")
    created = httpx.post(store.url + "/api/brains", json={"name": "private"},
                         headers={"Authorization": f"Bearer {alice}"}, timeout=30)
    assert created.status_code == 201, created.text
    brain_id = created.json()["id"]
    assert get(store, f"/api/brains/{brain_id}", bob).status_code == 404
    assert get(store, f"/api/brains/{brain_id}/sync", bob).status_code == 404
    assert brain_id not in {b["id"] for b in get(store, "/api/brains", bob).json()}
    delete = httpx.delete(f"{store.url}/api/brains/{brain_id}", headers={"Authorization": f"Bearer {bob}"})
    assert delete.status_code == 404
    assert get(store, f"/api/brains/{brain_id}", alice).status_code == 200


# -- operator commands ------------------------------------------------------------------------------------


def test_removed_user_stays_out_until_allowed(store: Store, issuer: IssuerClient) -> None:
    mint = minter(issuer)
    token = mint(sub="removed-user")
    assert get(store, "/auth/me", token).status_code == 200
    user_id = user_id_for(issuer.issuer, "removed-user")

    removed = cli(store, "user", "remove", user_id)
    assert removed.returncode == 0, removed.stderr
    # The verified token is cached in the store, but the verdict does not outlive removal.
    assert get(store, "/auth/me", token).status_code == 401
    assert get(store, "/auth/me", mint(sub="removed-user")).status_code == 401
    assert all(u["id"] != user_id for u in users(store))
    listing = cli(store, "user", "list")
    assert f"removed OIDC user {user_id}" in listing.stdout

    allowed = cli(store, "user", "allow", user_id)
    assert allowed.returncode == 0, allowed.stderr + allowed.stdout
    me = get(store, "/auth/me", token)
    assert me.status_code == 200 and me.json()["user"]["id"] == user_id
    assert [b["name"] for b in get(store, "/api/brains", token).json()] == ["default"]


def test_allow_of_unknown_identity_fails(store: Store) -> None:
    done = cli(store, "user", "allow", "oidc_doesnotexist")
    assert done.returncode != 0


def test_rotate_gives_an_oidc_user_a_static_token(store: Store, issuer: IssuerClient) -> None:
    token = minter(issuer)(sub="rotated-user")
    user_id = get(store, "/auth/me", token).json()["user"]["id"]
    done = cli(store, "user", "rotate", user_id)
    assert done.returncode == 0, done.stderr
    static = done.stdout.strip().splitlines()[-1]
    assert static.startswith("bst_")
    me = get(store, "/auth/me", static)
    assert me.status_code == 200 and me.json()["user"]["id"] == user_id
    assert get(store, "/auth/me", token).status_code == 200  # the ID token keeps working too


def test_first_sign_in_with_an_e_mail_address_in_use_is_let_in_and_the_address_names_nobody(
        store: Store, issuer: IssuerClient) -> None:
    """A new OIDC identity whose e-mail address another account has (a static user the operator
    made for the same person, compared ignoring case) is let in: refusing would lock the person out
    with no command to let them in. The address then names neither account: sharing by it is
    refused as ambiguous (not the older account silently), and by name it works."""
    done = cli(store, "user", "add", "taken-static", "--email", f"taken@{DOMAIN}")
    assert done.returncode == 0, done.stderr
    before = len(users(store))
    second = minter(issuer)(sub="taken-second", email=f"Taken@{DOMAIN.upper()}")
    me = get(store, "/auth/me", second)
    assert me.status_code == 200, me.text
    assert len(users(store)) == before + 1
    brain = get(store, "/api/brains", second).json()[0]["id"]
    refused = cli(store, "share", brain, "--with", f"taken@{DOMAIN}", "--role", "viewer")
    assert refused.returncode == 1 and "several users have the e-mail address" in " ".join(refused.stderr.split())
    shared = cli(store, "share", brain, "--with", "taken-static", "--role", "viewer")
    assert shared.returncode == 0, shared.stderr


# -- separate stores: rotation, outages, limits, configuration ---------------------------------------------------


@pytest.fixture
def own_issuer(tmp_path: Path) -> Iterator[IssuerClient]:
    """An issuer process only this test uses."""
    with start_issuer(tmp_path) as client:
        yield client


def test_key_rotation_is_picked_up_without_restart(own_issuer: IssuerClient, tmp_path: Path) -> None:
    mint = minter(own_issuer)
    with running_store(tmp_path / "data", env=oidc_env(own_issuer)) as running:
        assert get(running, "/auth/me", mint(sub="rot")).status_code == 200
        old = mint("ES256", sub="rot")
        own_issuer.rotate(keep_old=False)
        for alg in ("RS256", "ES256"):
            assert get(running, "/auth/me", mint(alg, sub="rot")).status_code == 200
        assert get(running, "/auth/me", old).status_code == 401  # its key was withdrawn


@pytest.mark.parametrize("outage", ["500", "hang", "stopped"])
def test_issuer_down(own_issuer: IssuerClient, tmp_path: Path, outage: str) -> None:
    """Static tokens keep working; OIDC requests get 401 quickly; the issuer is not hammered."""
    mint = minter(own_issuer)
    with running_store(tmp_path / "data", env=oidc_env(own_issuer)) as running:
        static = running.add_user("static-user")
        tokens = [mint(sub=f"down-{n}") for n in range(12)]
        if outage == "500":
            own_issuer.behave(status=500)
        elif outage == "hang":
            own_issuer.behave(hang=True, hang_seconds=20)
        else:
            own_issuer.stop()
        started = time.monotonic()
        assert get(running, "/auth/me", tokens[0]).status_code == 401
        assert time.monotonic() - started < 10  # bounded by the store's 5 s fetch deadline
        for token in tokens[1:]:
            started = time.monotonic()
            assert get(running, "/auth/me", token).status_code == 401
            # The failure is remembered: no fetch and no wait for the issuer per request.
            assert time.monotonic() - started < 4  # below the 5 s fetch deadline a retry would cost
        assert get(running, "/auth/me", static).status_code == 200
        if outage != "stopped":
            assert own_issuer.total_requests() <= 1


def failures_until_blocked(store: Store, token: str, limit: int) -> list[int]:
    """Send a failing token until the address is refused (bounded); the statuses seen."""
    statuses: list[int] = []
    for _ in range(limit + 3):
        statuses.append(get(store, "/auth/me", token).status_code)
        if statuses[-1] == 429:
            break
    return statuses


def test_blocked_address_gets_no_verification_work(own_issuer: IssuerClient, tmp_path: Path) -> None:
    """Failed logins count per address; once blocked, even a valid token costs the issuer nothing."""
    mint = minter(own_issuer)
    env = oidc_env(own_issuer, STORE_RATE_FAILED_LOGINS_PER_MIN="3")
    with running_store(tmp_path / "data", env=env) as running:
        statuses = failures_until_blocked(running, "a.b.c", 3)
        assert statuses[-1] == 429 and set(statuses[:-1]) == {401} and 3 <= len(statuses) - 1 <= 4
        response = get(running, "/auth/me", mint(sub="blocked"))
        assert response.status_code == 429 and int(response.headers["retry-after"]) >= 1
        assert own_issuer.total_requests() == 0
        assert users(running) == []


def test_forged_tokens_count_as_failed_logins(own_issuer: IssuerClient, tmp_path: Path) -> None:
    mint = minter(own_issuer)
    env = oidc_env(own_issuer, STORE_RATE_FAILED_LOGINS_PER_MIN="2")
    with running_store(tmp_path / "data", env=env) as running:
        statuses = failures_until_blocked(running, ATTACKS["tampered payload"](own_issuer, mint), 2)
        assert statuses[-1] == 429 and set(statuses[:-1]) == {401}
        requests_before = own_issuer.total_requests()
        assert get(running, "/auth/me", mint(sub="after-block")).status_code == 429
        assert own_issuer.total_requests() == requests_before


def test_trailing_slash_in_configuration_keeps_user_ids(own_issuer: IssuerClient, tmp_path: Path) -> None:
    env = oidc_env(own_issuer, STORE_OIDC_ISSUER=own_issuer.issuer + "/")
    with running_store(tmp_path / "data", env=env) as running:
        me = get(running, "/auth/me", minter(own_issuer)(sub="slash"))
        assert me.status_code == 200
        assert me.json()["user"]["id"] == user_id_for(own_issuer.issuer, "slash")


@pytest.mark.parametrize(
    "env",
    [
        {"STORE_OIDC_ISSUER": "https://accounts.google.com", "STORE_OIDC_AUDIENCE": "client"},
        {"STORE_OIDC_ISSUER": "http://issuer.example", "STORE_OIDC_AUDIENCE": "client"},
        {"STORE_OIDC_ISSUER": "http://127.0.0.1:9", "STORE_OIDC_AUDIENCE": ""},
    ],
)
def test_unusable_oidc_settings_refuse_to_start(tmp_path: Path, env: dict[str, str]) -> None:
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("STORE_")}
    done = subprocess.run([console_script("brain-store"), "serve", "--port", "0", "--data", str(tmp_path / "d")],
                          capture_output=True, text=True, cwd=REPO_ROOT, env={**clean, **env}, timeout=60)
    assert done.returncode != 0
    assert "STORE_OIDC" in done.stderr


@pytest.mark.parametrize(("level", "workers"), [("info", 1), ("warning", 2), ("debug", 1)])
def test_the_log_level_holds_back_info_lines_and_httpx_requests(
        issuer: IssuerClient, tmp_path: Path, level: str, workers: int) -> None:
    """STORE_LOG_LEVEL (every worker's): at warning no INFO line; at info, and above, not httpx's line
    per request to the issuer (naming its URL), which only debug lets through."""
    subject = f"log-{level}"
    env = oidc_env(issuer, STORE_LOG_LEVEL=level.upper())
    with running_store(tmp_path / "data", env=env, workers=workers) as running:
        assert get(running, "/auth/me", minter(issuer)(sub=subject)).status_code == 200  # fetches, a new user
        assert issuer.total_requests() >= 2  # discovery and JWKS
        assert any(u["id"] == user_id_for(issuer.issuer, subject) for u in users(running))
        running.server.stop()
        lines = running.server.log().splitlines()
    from_httpx = [line for line in lines if line.startswith(("INFO httpx", "DEBUG httpx", "DEBUG httpcore"))]
    created = [line for line in lines if line.startswith("INFO store.auth: created user")]
    if level == "debug":
        assert any(f"GET {issuer.issuer}/.well-known/openid-configuration" in line for line in from_httpx), lines
        assert created, lines
    else:
        assert from_httpx == [] and not any(issuer.issuer in line for line in lines), lines
        assert created if level == "info" else not any(line.startswith("INFO ") for line in lines), lines


def test_a_bad_log_level_is_refused_in_one_line(tmp_path: Path) -> None:
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("STORE_")}
    done = subprocess.run([console_script("brain-store"), "serve", "--port", "0", "--data", str(tmp_path / "d")],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
                          env={**clean, "HOME": str(tmp_path), "STORE_LOG_LEVEL": "verbose"})
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "Error: STORE_LOG_LEVEL: expected debug, info, warning or error, got 'verbose'\n"
    assert list(tmp_path.iterdir()) == []  # no data directory made


def test_without_oidc_settings_jwts_are_just_bad_tokens(tmp_path: Path, issuer: IssuerClient) -> None:
    with running_store(tmp_path / "data") as running:
        assert "oidc" not in httpx.get(running.url + "/health").json()["capabilities"]
        assert get(running, "/auth/me", minter(issuer)(sub="nobody")).status_code == 401
        assert issuer.total_requests() == 0


def test_concurrent_first_sight_creates_one_user_and_one_brain(store: Store, issuer: IssuerClient) -> None:
    from concurrent.futures import ThreadPoolExecutor

    tokens = [minter(issuer)(alg, sub="concurrent-first") for alg in ("RS256", "ES256") * 4]
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(lambda token: get(store, "/api/brains", token).status_code, tokens))
    assert statuses == [200] * len(tokens)
    user_id = user_id_for(issuer.issuer, "concurrent-first")
    assert sum(1 for u in users(store) if u["id"] == user_id) == 1
    listing = get(store, "/api/brains", tokens[0])
    assert listing.status_code == 200 and [b["name"] for b in listing.json()] == ["default"], (
        listing.status_code, listing.text, store.server.log()[-3000:])
