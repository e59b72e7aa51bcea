"""A small OpenID Connect issuer for tests, run as a real HTTP server on loopback.

Run it as ``python -m tests.support.oidc_issuer --port P [--path /realms/x] [--audience A]``.
It publishes a discovery document and a JWKS with one RSA and one EC (P-256) key,
issues real signed ID tokens through a test-only endpoint, and offers just enough of
the authorization-code flow (PKCE S256, nonce, rotating refresh tokens) for a client.

Test controls live under ``/_test/`` (never counted, never affected by failures):

- ``POST /_test/mint``: JSON ``{"claims": {...}, "alg": "RS256", "kid": ..., "ttl": 300,
  "headers": {...}}`` -> ``{"token": ...}``. A claim given as ``null`` is left out.
  ``alg`` may also be ``none``, ``HS256-public`` (HMAC keyed with the RSA public key
  PEM, the classic confusion attack) or ``ES256-with-rsa-kid`` (EC signature naming
  the RSA key).
- ``POST /_test/rotate``: ``{"keep_old": false}`` new RSA and EC keys with new ids.
- ``POST /_test/behaviour``: ``{"status": 500, "delay": 0.5, "drip": 0.1, "hang": false,
  "targets": ["discovery", "jwks"], "discovery": {...overrides}, "jwks_padding": 0}``.
- ``POST /_test/login``: claims used for the next authorizations (``{"deny": true}`` refuses).
- ``POST /_test/revoke``: every refresh token issued so far stops working.
- ``GET /_test/counts``: requests received per path; ``POST /_test/reset``: clear
  counts, behaviour and the login claims (keys are kept).
- ``GET /_test/secrets``: every authorization code and token the flow handed out and every PKCE
  verifier it was sent, oldest first.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import secrets
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

HANG_SECONDS = 30.0  # long enough to outlast any client timeout, short enough to end


@dataclass
class SigningKey:
    """One key pair the issuer signs with, and its public JWK."""

    kid: str
    alg: str
    private: Any

    def public_jwk(self) -> dict[str, Any]:
        """The public half as a JWK with ``kid``, ``alg`` and ``use``."""
        to_jwk = RSAAlgorithm.to_jwk if self.alg == "RS256" else ECAlgorithm.to_jwk
        jwk = to_jwk(self.private.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}


def new_keys(generation: int) -> tuple[SigningKey, SigningKey]:
    """A fresh RSA-2048 and EC P-256 key pair with distinct key ids."""
    rsa_key = SigningKey(f"rsa-{generation}-{secrets.token_hex(4)}", "RS256", rsa.generate_private_key(65537, 2048))
    ec_key = SigningKey(f"ec-{generation}-{secrets.token_hex(4)}", "ES256", ec.generate_private_key(ec.SECP256R1()))
    return rsa_key, ec_key


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass
class PendingCode:
    """An authorization code waiting for its token request."""

    client_id: str
    redirect_uri: str
    challenge: str
    nonce: str | None
    claims: dict[str, Any]
    expires: float


@dataclass
class IssuerState:
    """Everything the issuer remembers; guarded by ``lock``."""

    issuer: str
    audience: str
    client_secret: str = ""  # when set, the token endpoint requires it (post or basic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    generation: int = 1
    rsa: SigningKey | None = None
    ec: SigningKey | None = None
    published: list[SigningKey] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    behaviour: dict[str, Any] = field(default_factory=dict)
    login: dict[str, Any] = field(default_factory=lambda: IssuerState.default_login())
    codes: dict[str, PendingCode] = field(default_factory=dict)
    refresh: dict[str, dict[str, Any]] = field(default_factory=dict)
    # codes and tokens handed out, PKCE verifiers received: for tests checking they are never logged
    secrets_seen: list[str] = field(default_factory=list)

    @staticmethod
    def default_login() -> dict[str, Any]:
        """Claims of the user who signs in through /authorize unless a test says otherwise."""
        return {"sub": "user-1", "email": "user1@example.com", "email_verified": True}

    def __post_init__(self) -> None:
        self.rsa, self.ec = new_keys(self.generation)
        self.published = [self.rsa, self.ec]

    def rotate(self, keep_old: bool) -> None:
        """Switch to new keys; optionally keep publishing the old ones."""
        self.generation += 1
        self.rsa, self.ec = new_keys(self.generation)
        self.published = [self.rsa, self.ec, *(self.published if keep_old else [])]

    def discovery(self) -> dict[str, Any]:
        """The discovery document, with any overrides a test asked for."""
        doc = {
            "issuer": self.issuer,
            "jwks_uri": self.issuer + "/jwks",
            "authorization_endpoint": self.issuer + "/authorize",
            "token_endpoint": self.issuer + "/token",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "scopes_supported": ["openid", "email", "profile", "offline_access"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        }
        doc.update(self.behaviour.get("discovery") or {})
        return doc

    def jwks(self) -> dict[str, Any]:
        """The published keys (plus padding when a test wants an oversized document)."""
        doc: dict[str, Any] = {"keys": [key.public_jwk() for key in self.published]}
        padding = int(self.behaviour.get("jwks_padding") or 0)
        if padding:
            doc["padding"] = "x" * padding
        return doc

    def claims(self, overrides: dict[str, Any], ttl: int) -> dict[str, Any]:
        """Default ID-token claims merged with ``overrides`` (``None`` removes a claim)."""
        now = int(time.time())
        merged: dict[str, Any] = {"iss": self.issuer, "aud": self.audience, "sub": "user-1", "iat": now,
                                  "exp": now + ttl}
        merged.update(overrides)
        return {name: value for name, value in merged.items() if value is not None}

    def sign(self, claims: dict[str, Any], alg: str, kid: Any = "", headers: dict[str, Any] | None = None) -> str:
        """Sign ``claims`` as asked, including deliberately broken variants."""
        assert self.rsa is not None and self.ec is not None
        extra = dict(headers or {})
        if alg == "none":
            return jwt.encode(claims, None, algorithm="none", headers=extra or None)
        if alg == "HS256-public":
            # pyjwt refuses an asymmetric key as an HMAC secret, so build this attack by hand.
            pem = self.rsa.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            header = {"alg": "HS256", "typ": "JWT", "kid": self.rsa.kid if kid == "" else kid, **extra}
            header = {name: value for name, value in header.items() if value is not None}
            signing_input = _b64url(json.dumps(header).encode()) + "." + _b64url(json.dumps(claims).encode())
            signature = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
            return signing_input + "." + _b64url(signature)
        if alg == "ES256-with-rsa-kid":
            key, alg, kid = self.ec, "ES256", self.rsa.kid
        elif alg == "RS256":
            key = self.rsa
        elif alg == "ES256":
            key = self.ec
        else:
            raise ValueError(f"unsupported alg {alg}")
        if kid == "":
            kid = key.kid
        if kid is not None:
            extra["kid"] = kid
        return jwt.encode(claims, key.private, algorithm=alg, headers=extra)


class Handler(BaseHTTPRequestHandler):
    """Routes requests to the issuer endpoints and the test controls."""

    server: IssuerServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: tests read counts, not logs."""

    # -- plumbing ---------------------------------------------------------------

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        drip = getattr(self, "_drip", 0.0)
        if not drip:
            self.wfile.write(data)
            return
        # A slow drip: each piece arrives well within a read timeout, the whole takes long.
        for start in range(0, len(data), 64):
            self.wfile.write(data[start:start + 64])
            self.wfile.flush()
            time.sleep(drip)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _misbehave(self, target: str) -> bool:
        """Apply the configured failure to ``target``; True when the response was already sent."""
        state = self.server.state
        with state.lock:
            behaviour = dict(state.behaviour)
        targets = behaviour.get("targets")
        if targets is not None and target not in targets:
            return False
        if behaviour.get("hang"):
            time.sleep(float(behaviour.get("hang_seconds") or HANG_SECONDS))
            self.close_connection = True
            return True
        if behaviour.get("delay"):
            time.sleep(float(behaviour["delay"]))
        self._drip = float(behaviour.get("drip") or 0.0)
        status = behaviour.get("status")
        if status:
            self._send(int(status), {"error": "server_error"})
            return True
        return False

    def _route(self) -> tuple[str, str]:
        path = urlsplit(self.path).path
        prefix = urlsplit(self.server.state.issuer).path
        if path.startswith("/_test/"):
            return "test", path[len("/_test/"):]
        if prefix and path.startswith(prefix):
            path = path[len(prefix):]
        return "public", path

    # -- verbs ------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        """Discovery, JWKS, authorize, and the read-only test controls."""
        kind, path = self._route()
        state = self.server.state
        if kind == "test":
            if path == "health":
                return self._send(200, {"status": "ok"})
            if path == "counts":
                with state.lock:
                    return self._send(200, dict(state.counts))
            if path == "secrets":
                with state.lock:
                    return self._send(200, list(state.secrets_seen))
            return self._send(404, {"error": "not found"})
        with state.lock:
            state.counts[urlsplit(self.path).path] += 1
        if path == "/.well-known/openid-configuration":
            if not self._misbehave("discovery"):
                with state.lock:
                    self._send(200, state.discovery(), {"Cache-Control": "max-age=3600"})
            return None
        if path == "/jwks":
            if not self._misbehave("jwks"):
                with state.lock:
                    self._send(200, state.jwks(), {"Cache-Control": "max-age=3600"})
            return None
        if path == "/authorize":
            if not self._misbehave("authorize"):
                self._authorize()
            return None
        return self._send(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        """Token endpoint and the test controls that change state."""
        kind, path = self._route()
        state = self.server.state
        body = self._body()
        if kind == "test":
            return self._control(path, json.loads(body or b"{}"))
        with state.lock:
            state.counts[urlsplit(self.path).path] += 1
        if path == "/token":
            if not self._misbehave("token"):
                self._token(body)
            return None
        return self._send(404, {"error": "not found"})

    # -- test controls ------------------------------------------------------------

    def _control(self, name: str, request: dict[str, Any]) -> None:
        state = self.server.state
        with state.lock:
            if name == "mint":
                claims = state.claims(dict(request.get("claims") or {}), int(request.get("ttl", 300)))
                token = state.sign(claims, request.get("alg", "RS256"), request.get("kid", ""),
                                   request.get("headers"))
                return self._send(200, {"token": token, "claims": claims})
            if name == "rotate":
                state.rotate(bool(request.get("keep_old")))
                return self._send(200, {"kids": [key.kid for key in state.published]})
            if name == "behaviour":
                state.behaviour = dict(request)
                return self._send(200, state.behaviour)
            if name == "login":
                state.login = dict(request)
                return self._send(200, state.login)
            if name == "revoke":
                state.refresh.clear()
                return self._send(200, {})
            if name == "reset":
                state.counts.clear()
                state.behaviour = {}
                state.login = IssuerState.default_login()
                return self._send(200, {})
        return self._send(404, {"error": "not found"})

    # -- authorization-code flow ------------------------------------------------------

    def _authorize(self) -> None:
        state = self.server.state
        query = {name: values[0] for name, values in parse_qs(urlsplit(self.path).query).items()}
        redirect_uri = query.get("redirect_uri", "")
        if not query.get("client_id") or urlsplit(redirect_uri).scheme not in ("http", "https"):
            return self._send(400, {"error": "invalid_request"})
        params: dict[str, str] = {"iss": state.issuer}
        if query.get("state") is not None:
            params["state"] = query["state"]
        with state.lock:
            login = dict(state.login)
        if query.get("response_type") != "code":
            params["error"] = "unsupported_response_type"
        elif query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            params["error"] = "invalid_request"
        elif login.pop("deny", False):
            params["error"] = "access_denied"
        else:
            code = secrets.token_urlsafe(24)
            with state.lock:
                state.codes[code] = PendingCode(query["client_id"], redirect_uri, query["code_challenge"],
                                                query.get("nonce"), login, time.time() + 60)
                state.secrets_seen.append(code)
            params["code"] = code
        separator = "&" if "?" in redirect_uri else "?"
        self._send(302, None, {"Location": redirect_uri + separator + urlencode(params)})

    def _client_authenticated(self, form: dict[str, str], secret: str) -> bool:
        """client_secret_post, or client_secret_basic (form-urlencoded id:secret in Basic)."""
        given = form.get("client_secret")
        authorization = self.headers.get("Authorization", "")
        if authorization.lower().startswith("basic "):
            try:
                decoded = base64.b64decode(authorization[6:]).decode()
            except ValueError:
                return False
            client_id, _, given = decoded.partition(":")
            form.setdefault("client_id", unquote_plus(client_id))
            given = unquote_plus(given)
        return given is not None and hmac.compare_digest(given.encode(), secret.encode())

    def _token(self, body: bytes) -> None:
        state = self.server.state
        form = {name: values[0] for name, values in parse_qs(body.decode("utf-8", "replace")).items()}
        grant = form.get("grant_type")
        if state.client_secret and not self._client_authenticated(form, state.client_secret):
            return self._send(401, {"error": "invalid_client"})
        with state.lock:
            if grant == "authorization_code":
                pending = state.codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                state.secrets_seen.append(verifier)
                challenge = _b64url(hashlib.sha256(verifier.encode()).digest())
                if (pending is None or pending.expires < time.time() or pending.client_id != form.get("client_id")
                        or pending.redirect_uri != form.get("redirect_uri")
                        or not hmac.compare_digest(challenge, pending.challenge)):
                    return self._send(400, {"error": "invalid_grant"})
                claims = dict(pending.claims)
                nonce = pending.nonce
                client_id = pending.client_id
            elif grant == "refresh_token":
                grant_record = state.refresh.pop(form.get("refresh_token", ""), None)
                if grant_record is None or grant_record["client_id"] != form.get("client_id"):
                    return self._send(400, {"error": "invalid_grant"})
                claims = dict(grant_record["claims"])
                nonce = None
                client_id = grant_record["client_id"]
            else:
                return self._send(400, {"error": "unsupported_grant_type"})
            id_claims = state.claims({**claims, "aud": client_id, "nonce": nonce}, 3600)
            id_token = state.sign(id_claims, "RS256")
            refresh_token, access_token = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
            state.refresh[refresh_token] = {"client_id": client_id, "claims": claims}
            state.secrets_seen += [id_token, refresh_token, access_token]
        self._send(200, {"access_token": access_token, "token_type": "Bearer", "expires_in": 3600,
                         "id_token": id_token, "refresh_token": refresh_token, "scope": "openid email"},
                   {"Cache-Control": "no-store"})


class IssuerServer(ThreadingHTTPServer):
    """A threading HTTP server carrying the issuer state."""

    daemon_threads = True
    state: IssuerState


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="", help="path part of the issuer URL, e.g. /realms/test")
    parser.add_argument("--audience", default="brain-store")
    parser.add_argument("--client-secret", default="", help="require this client secret at the token endpoint")
    args = parser.parse_args(argv)
    server = IssuerServer(("127.0.0.1", args.port), Handler)
    server.state = IssuerState(issuer=f"http://127.0.0.1:{args.port}{args.path.rstrip('/')}", audience=args.audience,
                               client_secret=args.client_secret)
    print(f"oidc issuer listening on http://127.0.0.1:{args.port} issuer={server.state.issuer}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()


# -- used by tests: start the issuer process and talk to its controls ------------------


class IssuerClient:
    """A tiny client for a running test issuer: mint tokens, steer failures, read counts."""

    def __init__(self, base_url: str, issuer: str, audience: str, server: Any = None) -> None:
        self.base_url = base_url
        self.issuer = issuer
        self.audience = audience
        self.server = server  # the ServerProcess, when started by start_issuer
        self._http: Any = None

    def _client(self) -> Any:
        """One reusable HTTP client (creating one per call is slow on a busy machine)."""
        import httpx

        if self._http is None:
            self._http = httpx.Client(timeout=10)
        return self._http

    def stop(self) -> None:
        """Stop the issuer process (an outage that refuses connections)."""
        if self.server is not None:
            self.server.stop()
        self.close()

    def close(self) -> None:
        """Close the HTTP client."""
        if self._http is not None:
            self._http.close()
            self._http = None

    def _post(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._client().post(f"{self.base_url}/_test/{name}", json=body)
        response.raise_for_status()
        return dict(response.json())

    def mint(self, alg: str = "RS256", *, kid: Any = "", ttl: int = 300, headers: dict[str, Any] | None = None,
             **claims: Any) -> str:
        """A signed ID token with default claims overridden by ``claims`` (None removes one)."""
        body: dict[str, Any] = {"alg": alg, "claims": claims, "ttl": ttl, "headers": headers or {}}
        if kid != "":
            body["kid"] = kid
        return str(self._post("mint", body)["token"])

    def rotate(self, keep_old: bool = False) -> list[str]:
        """New signing keys; returns the published key ids."""
        return list(self._post("rotate", {"keep_old": keep_old})["kids"])

    def behave(self, **behaviour: Any) -> None:
        """Set failure behaviour (status, delay, drip, hang, hang_seconds, targets, discovery, jwks_padding)."""
        self._post("behaviour", behaviour)

    def login_as(self, **claims: Any) -> None:
        """Claims for the next authorization-code sign-ins (``deny=True`` refuses)."""
        self._post("login", claims)

    def revoke_refresh_tokens(self) -> None:
        """Make every refresh token issued so far invalid."""
        self._post("revoke", {})

    def reset(self) -> None:
        """Clear counts and failure behaviour."""
        self._post("reset", {})

    def counts(self) -> dict[str, int]:
        """Requests received per path (test controls excluded)."""
        response = self._client().get(f"{self.base_url}/_test/counts")
        response.raise_for_status()
        return {str(path): int(count) for path, count in response.json().items()}

    def secrets_seen(self) -> list[str]:
        """Every authorization code and token the issuer handed out so far, and every PKCE verifier sent to it."""
        response = self._client().get(f"{self.base_url}/_test/secrets")
        response.raise_for_status()
        return [str(item) for item in response.json()]

    def total_requests(self) -> int:
        """All non-control requests received so far."""
        return sum(self.counts().values())


def start_issuer(tmp_dir: Any, *, path: str = "", audience: str = "brain-store", client_secret: str = "") -> Any:
    """Context manager: run the issuer as a process on a free port, yield an IssuerClient."""
    from contextlib import contextmanager
    from pathlib import Path

    from tests.support.processes import free_port, run_server

    @contextmanager
    def running() -> Any:
        port = free_port()
        argv = [sys.executable, "-m", "tests.support.oidc_issuer", "--port", str(port), "--path", path,
                "--audience", audience, "--client-secret", client_secret]
        log_path = Path(tmp_dir) / f"oidc-issuer-{port}.log"
        with run_server(argv, port=port, log_path=log_path, health_path="/_test/health") as server:
            client = IssuerClient(server.base_url, server.base_url + path.rstrip("/"), audience, server)
            try:
                yield client
            finally:
                client.close()

    return running()
